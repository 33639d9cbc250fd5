// Chapter 05, grouped-query attention: the head mapping, the attention of h query heads over g
// shared key/value heads against a double oracle, and the identities that make MHA and MQA its two
// ends (MQA = GQA with g = 1, GQA with g = h = chapter 00's multi-head attention, GQA = MHA with
// each kv projection repeated h/g times); then each error path.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../common/attention_oracle.hpp"
#include "../common/testing.hpp"
#include "kv_test_helpers.hpp"
#include "tvlab/core/kv_heads.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/attention.hpp"
#include "tvlab/ref/gqa_attention.hpp"

namespace tvlab::ch05 {
namespace {

using tvlab::ch05_testing::expand_heads;
using tvlab::ch05_testing::random_gqa_weights;
using tvlab::testing::Context;
using tvlab::testing::matches;
using tvlab::testing::reduction_rtol;
using tvlab::testing::throws_error_naming;

std::string heads_label(KvHeads heads) {
  return "h " + std::to_string(heads.num_heads) + ", g " + std::to_string(heads.num_kv_heads);
}

// ------------------------------------------------------------------------------- the head mapping

TEST(Ch05KvHeads, query_head_i_reads_kv_head_i_over_the_group_size) {
  // MHA: every head its own; MQA: all heads kv head 0; GQA 8/2: heads 0-3 read 0, heads 4-7 read 1.
  for (std::size_t i = 0; i < 8; ++i) {
    EXPECT_EQ((KvHeads{8, 8}.kv_head_of(i)), i);
    EXPECT_EQ((KvHeads{8, 1}.kv_head_of(i)), 0u);
    EXPECT_EQ((KvHeads{8, 2}.kv_head_of(i)), i < 4 ? 0u : 1u);
  }
  EXPECT_EQ((KvHeads{12, 3}.group_size()), 4u);
  // Each kv head serves exactly h/g query heads, consecutive ones.
  const KvHeads gqa{12, 4};
  std::vector<int> served(4, 0);
  for (std::size_t i = 0; i < 12; ++i) ++served[gqa.kv_head_of(i)];
  EXPECT_EQ(served, std::vector<int>(4, 3));
}

TEST(Ch05KvHeads, repeating_the_kv_projections_gives_mha_head_i_the_columns_of_kv_head_i_over_r) {
  Rng rng(3);
  const KvHeads heads{6, 2};
  const std::size_t d_model = 5, d_k = 3;
  const GqaWeights w = random_gqa_weights(rng, d_model, heads, d_k);
  const MhaWeights mha = repeat_kv_heads(w, heads);
  ASSERT_EQ(shape_of(mha.w_k), (std::vector<std::size_t>{d_model, 6 * d_k}));
  for (std::size_t i = 0; i < 6; ++i)
    for (std::size_t c = 0; c < d_model; ++c)
      for (std::size_t d = 0; d < d_k; ++d) {
        EXPECT_EQ(mha.w_k(c, i * d_k + d), w.w_k(c, (i / 3) * d_k + d)) << "head " << i;
        EXPECT_EQ(mha.w_v(c, i * d_k + d), w.w_v(c, (i / 3) * d_k + d)) << "head " << i;
      }
  EXPECT_EQ(mha.w_q, w.w_q);
  EXPECT_EQ(mha.w_o, w.w_o);
}

// ------------------------------------------------------------------ grouped attention, the oracle

struct GroupedCase {
  KvHeads heads;
  std::size_t seq_q, seq_k, head_dim;
  const char* mask;  // "none", "causal", "alibi", "bias"
};

TEST(Ch05Gqa, grouped_attention_matches_the_double_oracle_on_repeated_kv_heads) {
  const GroupedCase cases[] = {{{4, 2}, 7, 7, 8, "none"},  {{6, 3}, 5, 11, 4, "causal"}, {{8, 1}, 1, 9, 16, "causal"},
                               {{6, 2}, 9, 9, 5, "alibi"}, {{4, 1}, 6, 13, 8, "bias"},   {{6, 2}, 17, 17, 3, "causal"},
                               {{3, 3}, 4, 6, 4, "causal"}};
  std::uint64_t seed = 70;
  for (const GroupedCase& c : cases) {
    ++seed;
    Rng rng(seed);
    const std::size_t h = static_cast<std::size_t>(c.heads.num_heads), g = static_cast<std::size_t>(c.heads.num_kv_heads);
    const Tensor3 q = rng.normal_tensor(h, c.seq_q, c.head_dim);
    Tensor3 k = rng.normal_tensor(g, c.seq_k, c.head_dim);
    const Tensor3 v = rng.normal_tensor(g, c.seq_k, c.head_dim);
    k(0, c.seq_k - 1, 0) *= 6.0f;  // an outlier key, so that the softmax is not flat
    AttentionConfig cfg;
    const std::string mask = c.mask;
    cfg.mask.causal = mask == "causal" || mask == "alibi";
    if (mask == "alibi") {
      DTensor1 slopes = DTensor1::from_shape({h});
      for (std::size_t t = 0; t < h; ++t) slopes(t) = std::pow(2.0, -8.0 * static_cast<double>(t + 1) / static_cast<double>(h));
      cfg.mask.alibi_slopes = slopes;  // per query head: the grouped loop must index them by t, not by kv head
    }
    if (mask == "bias") cfg.mask.bias = rng.normal_matrix(c.seq_q, c.seq_k);
    const Tensor3 out = ref::grouped_scaled_dot_product_attention(q, k, v, cfg);
    // The oracle: chapter 00's double-precision attention over each kv head copied h/g times.
    const Tensor3 k_rep = expand_heads(k, h), v_rep = expand_heads(v, h);
    // As chapter 00's attention tests: a score error of eps sqrt(d) M moves the output by at most
    // 2 delta max|v|, and P V adds a reduction of length seq_k.
    const double rtol = reduction_rtol(std::max(c.head_dim, c.seq_k));
    const Tolerance tol{attention_tolerance(c.head_dim, c.seq_k, testing::score_magnitude(q, k_rep, cfg),
                                            xt::amax(xt::abs(v))()),
                        rtol};
    EXPECT_TRUE(matches(out, testing::sdpa_oracle(q, k_rep, v_rep, cfg), tol,
                        {"grouped_scaled_dot_product_attention, " + heads_label(c.heads) + ", mask " + mask,
                         {"t", "i", "d"}, seed, "",
                         "query head t reads kv head t / (h/g) (consecutive heads share one), not t % g"}));
  }
}

TEST(Ch05Gqa, a_query_that_may_see_no_key_gets_zero) {
  Rng rng(5);
  const Tensor3 q = rng.normal_tensor(4, 3, 4), k = rng.normal_tensor(2, 5, 4), v = rng.normal_tensor(2, 5, 4);
  AttentionConfig cfg;
  Mask2 allowed = xt::ones<bool>({3, 5});
  for (std::size_t j = 0; j < 5; ++j) allowed(1, j) = false;
  cfg.mask.allowed = allowed;
  const Tensor3 out = ref::grouped_scaled_dot_product_attention(q, k, v, cfg);
  for (std::size_t t = 0; t < 4; ++t)
    for (std::size_t d = 0; d < 4; ++d) EXPECT_EQ(out(t, 1, d), 0.0f) << "head " << t << ", d " << d;
}

// ------------------------------------------------------------------------------ the layer, identities

TEST(Ch05Gqa, the_layer_matches_the_double_oracle_of_mha_with_repeated_kv_projections) {
  // Cross-attention (seq_q != seq_k) with a causal mask aligned bottom-right, and self-attention.
  for (const KvHeads heads : {KvHeads{4, 2}, KvHeads{6, 3}, KvHeads{6, 1}, KvHeads{3, 3}}) {
    for (const bool causal : {false, true}) {
      const std::uint64_t seed = 90 + static_cast<std::uint64_t>(10 * heads.num_heads + heads.num_kv_heads) + causal;
      Rng rng(seed);
      const std::size_t d_model = 12, head_dim = 4, seq_q = causal ? 7 : 9, seq_k = 11;
      const GqaWeights w = random_gqa_weights(rng, d_model, heads, head_dim);
      const Tensor2 x_q = rng.normal_matrix(seq_q, d_model), x_kv = rng.normal_matrix(seq_k, d_model);
      AttentionConfig cfg;
      cfg.mask.causal = causal;
      const Tensor2 y = ref::grouped_query_attention(x_q, x_kv, w, heads, cfg);
      // As chapter 00's multi-head test: four chained reductions of length <= max(d_model, seq_k) on O(1) values.
      const double rtol = 4 * reduction_rtol(std::max(d_model, seq_k));
      EXPECT_TRUE(matches(y, testing::mha_oracle(x_q, x_kv, repeat_kv_heads(w, heads), heads.num_heads, cfg),
                          {rtol, rtol},
                          {"grouped_query_attention, " + heads_label(heads) + (causal ? ", causal" : ""), {"i", "c"},
                           seed, "", "Q = X_q W_q (h heads), K = X_kv W_k and V = X_kv W_v (g heads), head t reads "
                                     "kv head t / (h/g), then Concat(heads) W_o"}));
    }
  }
}

TEST(Ch05Gqa, mqa_is_gqa_with_one_kv_head) {
  // MQA as document 004 writes it (Shazeer 2019): Q_i = X W_i^Q, K = X W^K, V = X W^V,
  // head_i = Attention(Q_i, K, V): computed here in double, every head against the one K and V.
  const int h = 4;
  const std::size_t d_model = 10, d_k = 5, n = 8;
  const std::uint64_t seed = 17;
  Rng rng(seed);
  const GqaWeights w = random_gqa_weights(rng, d_model, {h, 1}, d_k);
  const Tensor2 x = rng.normal_matrix(n, d_model);
  DTensor2 K = xt::zeros<double>({n, d_k}), V = xt::zeros<double>({n, d_k});
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t d = 0; d < d_k; ++d)
      for (std::size_t c = 0; c < d_model; ++c) {
        K(j, d) += static_cast<double>(x(j, c)) * w.w_k(c, d);
        V(j, d) += static_cast<double>(x(j, c)) * w.w_v(c, d);
      }
  DTensor2 expected = xt::zeros<double>({n, d_model});
  for (std::size_t t = 0; t < static_cast<std::size_t>(h); ++t)
    for (std::size_t i = 0; i < n; ++i) {
      std::vector<double> q(d_k, 0.0), p(n, 0.0), head(d_k, 0.0);
      for (std::size_t d = 0; d < d_k; ++d)
        for (std::size_t c = 0; c < d_model; ++c) q[d] += static_cast<double>(x(i, c)) * w.w_q(c, t * d_k + d);
      double sum = 0.0;
      for (std::size_t j = 0; j <= i; ++j) {  // causal
        double s = 0.0;
        for (std::size_t d = 0; d < d_k; ++d) s += q[d] * K(j, d);
        p[j] = std::exp(s / std::sqrt(static_cast<double>(d_k)));
        sum += p[j];
      }
      for (std::size_t j = 0; j <= i; ++j)
        for (std::size_t d = 0; d < d_k; ++d) head[d] += p[j] / sum * V(j, d);
      for (std::size_t c = 0; c < d_model; ++c)
        for (std::size_t d = 0; d < d_k; ++d) expected(i, c) += head[d] * w.w_o(t * d_k + d, c);
    }
  AttentionConfig cfg;
  cfg.mask.causal = true;
  const double rtol = 4 * reduction_rtol(d_model);  // four chained reductions of length <= d_model on O(1) values
  EXPECT_TRUE(matches(ref::grouped_query_attention(x, x, w, {h, 1}, cfg), expected, {rtol, rtol},
                      {"grouped_query_attention as MQA (g = 1)", {"i", "c"}, seed, "",
                       "with g = 1 every query head reads the same K and V"}));
}

TEST(Ch05Gqa, gqa_with_as_many_kv_heads_as_query_heads_is_chapter_00s_multi_head_attention) {
  for (const int h : {1, 3, 4}) {
    Rng rng(30 + static_cast<std::uint64_t>(h));
    const std::size_t d_model = 12, d_k = 4;
    const GqaWeights g = random_gqa_weights(rng, d_model, {h, h}, d_k);
    const MhaWeights mha{g.w_q, g.w_k, g.w_v, g.w_o};
    const Tensor2 x_q = rng.normal_matrix(6, d_model), x_kv = rng.normal_matrix(9, d_model);
    for (const bool causal : {false, true}) {
      AttentionConfig cfg;
      cfg.mask.causal = causal;
      // The same sums in the same order (projections, then chapter 00's loops): equal to the last bit.
      EXPECT_EQ(ref::grouped_query_attention(x_q, x_kv, gqa_weights_from_mha(mha), {h, h}, cfg),
                ref::multi_head_attention(x_q, x_kv, mha, h, cfg))
          << "h = g = " << h << (causal ? ", causal" : "");
    }
  }
}

TEST(Ch05Gqa, gqa_is_mha_with_each_kv_projection_repeated_h_over_g_times) {
  for (const KvHeads heads : {KvHeads{4, 2}, KvHeads{8, 2}, KvHeads{6, 3}, KvHeads{5, 1}}) {
    Rng rng(50 + static_cast<std::uint64_t>(heads.num_heads * heads.num_kv_heads));
    const std::size_t d_model = 16, d_k = 4, n = 10;
    const GqaWeights w = random_gqa_weights(rng, d_model, heads, d_k);
    const Tensor2 x = rng.normal_matrix(n, d_model);
    AttentionConfig cfg;
    cfg.mask.causal = true;
    // The repeated columns give MHA the same projected keys bit for bit, and the loops then add the
    // same numbers in the same order: equal to the last bit.
    EXPECT_EQ(ref::grouped_query_attention(x, x, w, heads, cfg),
              ref::multi_head_attention(x, x, repeat_kv_heads(w, heads), heads.num_heads, cfg))
        << heads_label(heads);
  }
}

// ------------------------------------------------------------------------------------ bad input

TEST(Ch05Gqa, rejects_head_counts_that_do_not_divide_naming_num_kv_heads) {
  EXPECT_TRUE(throws_error_naming([] { validate_kv_heads("gqa", {12, 5}); }, {"gqa", "num_heads (12)", "num_kv_heads (5)"}));
  EXPECT_TRUE(throws_error_naming([] { validate_kv_heads("gqa", {0, 1}); }, {"num_heads", "positive"}));
  EXPECT_TRUE(throws_error_naming([] { validate_kv_heads("gqa", {4, 0}); }, {"num_kv_heads", "positive"}));
  EXPECT_TRUE(throws_error_naming([] { validate_kv_heads("gqa", {4, -2}); }, {"num_kv_heads", "positive"}));
  EXPECT_TRUE(throws_error_naming([] { (void)KvHeads{6, 4}.kv_head_of(0); }, {"num_kv_heads (4)"}));
  EXPECT_TRUE(throws_error_naming([] { (void)KvHeads{6, 3}.kv_head_of(6); }, {"query_head (6)", "num_heads (6)"}));

  Rng rng(1);
  const Tensor3 q = rng.normal_tensor(6, 3, 4), k = rng.normal_tensor(4, 5, 4), v = rng.normal_tensor(4, 5, 4);
  EXPECT_TRUE(throws_error_naming([&] { ref::grouped_scaled_dot_product_attention(q, k, v); },
                                  {"grouped_scaled_dot_product_attention", "num_kv_heads", "k"}));
  const GqaWeights w = random_gqa_weights(rng, 8, {6, 3}, 4);
  const Tensor2 x = rng.normal_matrix(3, 8);
  EXPECT_TRUE(throws_error_naming([&] { ref::grouped_query_attention(x, x, w, {6, 4}); },
                                  {"grouped_query_attention", "num_kv_heads (4)"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::grouped_query_attention(x, x, w, {0, 3}); }, {"num_heads", "positive"}));
}

TEST(Ch05Gqa, rejects_mismatched_shapes_and_nan_naming_the_parameter) {
  Rng rng(2);
  const KvHeads heads{4, 2};
  const GqaWeights w = random_gqa_weights(rng, 8, heads, 3);
  const Tensor2 x = rng.normal_matrix(5, 8);
  const auto with = [&](auto change) {
    GqaWeights bad = w;
    change(bad);
    return bad;
  };
  const auto gqa = [&](const Tensor2& xq, const GqaWeights& weights) {
    return [&, xq, weights] { ref::grouped_query_attention(xq, x, weights, heads); };
  };
  // w_k with h d_k columns (an MHA layout passed as GQA): names w_k and what it should be.
  EXPECT_TRUE(throws_error_naming(gqa(x, with([&](GqaWeights& b) { b.w_k = rng.normal_matrix(8, 12); })),
                                  {"grouped_query_attention", "w_k", "columns 12", "expected 6", "num_kv_heads"}));
  EXPECT_TRUE(throws_error_naming(gqa(x, with([&](GqaWeights& b) { b.w_v = rng.normal_matrix(7, 6); })), {"w_v", "rows"}));
  EXPECT_TRUE(throws_error_naming(gqa(x, with([&](GqaWeights& b) { b.w_o = rng.normal_matrix(12, 7); })), {"w_o", "columns"}));
  EXPECT_TRUE(throws_error_naming(gqa(x, with([&](GqaWeights& b) { b.w_q = rng.normal_matrix(8, 10); })),
                                  {"w_q", "multiple of num_heads"}));
  EXPECT_TRUE(throws_error_naming(gqa(x, with([&](GqaWeights& b) { b.w_q = Tensor2::from_shape({8, 0}); })),
                                  {"w_q", "empty"}));
  EXPECT_TRUE(throws_error_naming(gqa(rng.normal_matrix(5, 9), w), {"x_q", "d_model"}));
  Tensor2 x_nan = x;
  x_nan(2, 3) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming(gqa(x_nan, w), {"x_q", "non-finite"}));
  EXPECT_TRUE(throws_error_naming(gqa(x, with([](GqaWeights& b) { b.w_v(0, 0) = INFINITY; })), {"w_v", "non-finite"}));

  const Tensor3 q = rng.normal_tensor(4, 3, 4), k = rng.normal_tensor(2, 5, 4);
  EXPECT_TRUE(throws_error_naming([&] { ref::grouped_scaled_dot_product_attention(q, k, rng.normal_tensor(4, 5, 4)); },
                                  {"v", "heads 4", "expected 2"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::grouped_scaled_dot_product_attention(q, rng.normal_tensor(2, 5, 3), rng.normal_tensor(2, 5, 3)); },
                                  {"k", "head_dim"}));
  AttentionConfig alibi;
  alibi.mask.alibi_slopes = DTensor1{0.5, 0.25};  // one per kv head, but ALiBi's slopes belong to the query heads
  EXPECT_TRUE(throws_error_naming([&] { ref::grouped_scaled_dot_product_attention(q, k, rng.normal_tensor(2, 5, 4), alibi); },
                                  {"mask.alibi_slopes", "length 2", "expected 4"}));
  EXPECT_TRUE(throws_error_naming([&] { repeat_kv_heads(w, {4, 3}); }, {"repeat_kv_heads", "num_kv_heads (3)"}));
}

}  // namespace
}  // namespace tvlab::ch05
