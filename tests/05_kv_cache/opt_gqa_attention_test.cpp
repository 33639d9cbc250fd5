// Chapter 05, the optimized grouped-query attention layer (tvlab/opt/gqa_attention.hpp) against the
// reference layer (tvlab/ref/gqa_attention.hpp): MHA, GQA and MQA, self and cross attention, with
// and without RoPE, under the causal rule and ALiBi; the GQA layer repeated into an MHA layer
// (chapter 00's optimized multi-head attention) gives the same function; and the bad inputs are
// refused with the reference's messages.

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "kv_test_helpers.hpp"
#include "tvlab/core/kv_heads.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/opt/attention.hpp"
#include "tvlab/opt/gqa_attention.hpp"
#include "tvlab/ref/gqa_attention.hpp"
#include "tvlab/ref/rope.hpp"

namespace tvlab::ch05 {
namespace {

using tvlab::ch05_testing::error_of;
using tvlab::ch05_testing::random_gqa_weights;
using tvlab::ch05_testing::rope_for;
using tvlab::testing::matches;
using tvlab::testing::reduction_rtol;
using tvlab::testing::throws_error_naming;

struct LayerCase {
  const char* label;
  KvHeads heads;
  std::size_t d_model, d_k, seq_q, seq_k;
  bool causal, alibi;
};
void PrintTo(const LayerCase& c, std::ostream* out) { *out << c.label; }

AttentionConfig config_for(const LayerCase& c) {
  AttentionConfig cfg;
  cfg.mask.causal = c.causal;
  if (c.alibi) {
    DTensor1 slopes = xt::zeros<double>({static_cast<std::size_t>(c.heads.num_heads)});
    for (std::size_t t = 0; t < slopes.size(); ++t) slopes(t) = 0.5 / static_cast<double>(t + 1);
    cfg.mask.alibi_slopes = slopes;
  }
  return cfg;
}

// The reference accumulates in double and rounds once; the optimized layer runs float SGEMMs, a
// float RoPE and a float softmax. Its error is a few roundings of each of the chain's reductions
// (the projections over d_model, the scores over d_k, the weighted sum over seq_k, the output
// projection over h d_k), each of values of order 1 (inputs N(0, 1), weights of variance 1/d_model):
// reduction_rtol(K) relative for the longest, K = max(d_model, h d_k, seq_k), and 1e-5 absolute for
// outputs near 0.
Tolerance layer_tolerance(const LayerCase& c) {
  const std::size_t k =
      std::max({c.d_model, static_cast<std::size_t>(c.heads.num_heads) * c.d_k, c.seq_k});
  return {1e-5, reduction_rtol(k)};
}

class OptGqaLayer : public ::testing::TestWithParam<LayerCase> {};

TEST_P(OptGqaLayer, equals_the_reference_layer_with_and_without_rope) {
  const LayerCase& c = GetParam();
  const std::uint64_t seed = 3500 + c.d_model + c.seq_q * 7 + c.seq_k;
  Rng rng(seed);
  const GqaWeights w = random_gqa_weights(rng, c.d_model, c.heads, c.d_k);
  const Tensor2 x_kv = rng.normal_matrix(c.seq_k, c.d_model);
  // Self attention passes the same tokens twice; cross attention its own queries.
  const Tensor2 x_q = c.seq_q == c.seq_k ? x_kv : rng.normal_matrix(c.seq_q, c.d_model);
  const AttentionConfig cfg = config_for(c);
  for (const bool with_rope : {false, true}) {
    const std::optional<AttentionRope> rope = with_rope ? std::optional(rope_for(c.d_k, 3)) : std::nullopt;
    const Tensor2 want = ref::grouped_query_attention(x_q, x_kv, w, c.heads, cfg, rope);
    const Tensor2 got = opt::grouped_query_attention(x_q, x_kv, w, c.heads, cfg, rope);
    EXPECT_TRUE(matches(got, xt::eval(xt::cast<double>(want)), layer_tolerance(c),
                        {std::string("grouped_query_attention, ") + c.label + (with_rope ? ", RoPE" : ""),
                         {"i", "c"},
                         seed,
                         "",
                         "query head t reads kv head t / (h/g); with RoPE query i sits at p0 + n_k - n_q + i and "
                         "key j at p0 + j"}));
  }
}

const LayerCase kLayerCases[] = {
    {"MHA h 4, d 16, d_k 4, 6 tokens, causal", {4, 4}, 16, 4, 6, 6, true, false},
    {"GQA h 4 g 2, d 16, d_k 4, 5 queries over 9 tokens", {4, 2}, 16, 4, 5, 9, false, false},
    {"MQA h 6, d 12, d_k 6, 1 query over 11 tokens, causal", {6, 1}, 12, 6, 1, 11, true, false},
    {"GQA h 6 g 3, d 10, d_k 4, 9 tokens, causal ALiBi", {6, 3}, 10, 4, 9, 9, true, true},
    {"GQA h 8 g 2, d 64, d_k 16, 70 tokens, causal", {8, 2}, 64, 16, 70, 70, true, false},
};
INSTANTIATE_TEST_SUITE_P(Ch05, OptGqaLayer, ::testing::ValuesIn(kLayerCases),
                         [](const auto& info) { return tvlab::testing::identifier(info.param.label); });

// GQA is MHA with each kv head's projection repeated h/g times (repeat_kv_heads): the optimized GQA
// layer equals chapter 00's optimized multi-head attention with the repeated weights. Both run
// float SGEMMs over the same sums in a different order: the tolerance of layer_tolerance.
TEST(Ch05OptGqa, equals_chapter_00_multi_head_attention_with_the_kv_heads_repeated) {
  Rng rng(41);
  const KvHeads heads{8, 2};
  const LayerCase c{"GQA h 8 g 2", heads, 24, 6, 11, 11, true, false};
  const GqaWeights w = random_gqa_weights(rng, c.d_model, heads, c.d_k);
  const Tensor2 x = rng.normal_matrix(c.seq_k, c.d_model);
  AttentionConfig causal;
  causal.mask.causal = true;
  const Tensor2 mha = opt::multi_head_attention(x, x, repeat_kv_heads(w, heads), heads.num_heads, causal);
  EXPECT_TRUE(matches(opt::grouped_query_attention(x, x, w, heads, causal), xt::eval(xt::cast<double>(mha)),
                      layer_tolerance(c),
                      {"opt::grouped_query_attention against opt::multi_head_attention on repeated kv heads",
                       {"i", "c"}, 41, "", "MHA head t's key/value columns are kv head t / (h/g)'s"}));
}

TEST(Ch05OptGqa, refuses_bad_input_with_the_reference_message) {
  Rng rng(42);
  const KvHeads heads{4, 2};
  const std::size_t d_model = 8, d_k = 2;
  const GqaWeights w = random_gqa_weights(rng, d_model, heads, d_k);
  const Tensor2 x = rng.normal_matrix(5, d_model);
  Tensor2 x_nan = x;
  x_nan(2, 3) = std::numeric_limits<float>::quiet_NaN();
  const Tensor2 narrow = rng.normal_matrix(5, d_model - 1);
  const Tensor2 huge = x * 1e20f;  // projections near 1e20: q . k near 1e40
  AttentionConfig causal, few_slopes;
  causal.mask.causal = true;
  few_slopes.mask.alibi_slopes = DTensor1(xt::ones<double>({2}));  // 2 slopes for 4 query heads
  AttentionRope odd_width = rope_for(4, 3);  // RoPE for d_k 4, the heads have 2
  struct Bad {
    const char* what;
    std::function<Tensor2(decltype(&ref::grouped_query_attention))> call;
    std::vector<std::string> names;
  };
  using Layer = decltype(&ref::grouped_query_attention);
  const std::vector<Bad> bad = {
      {"num_kv_heads 3 does not divide num_heads 4", [&](Layer f) { return f(x, x, w, {4, 3}, {}, std::nullopt); },
       {"num_kv_heads"}},
      {"w_k of g = 2 heads for g = 1", [&](Layer f) { return f(x, x, w, {4, 1}, {}, std::nullopt); }, {"w_k"}},
      {"x_q of d_model 7", [&](Layer f) { return f(narrow, x, w, heads, {}, std::nullopt); }, {"x_q", "d_model 7"}},
      {"x_kv of d_model 7", [&](Layer f) { return f(x, narrow, w, heads, {}, std::nullopt); }, {"x_kv", "d_model 7"}},
      {"NaN in x_kv", [&](Layer f) { return f(x, x_nan, w, heads, {}, std::nullopt); }, {"x_kv", "non-finite"}},
      {"6 queries after 5 keys, causal", [&](Layer f) { return f(rng.normal_matrix(6, d_model), x, w, heads, causal,
                                                                 std::nullopt); },
       {"causal"}},
      {"2 ALiBi slopes for 4 heads", [&](Layer f) { return f(x, x, w, heads, few_slopes, std::nullopt); },
       {"mask.alibi_slopes"}},
      {"RoPE for head_dim 4, heads of 2", [&](Layer f) { return f(x, x, w, heads, {}, odd_width); }, {"head_dim"}},
      {"projections beyond float's range", [&](Layer f) { return f(huge, huge, w, heads, {}, std::nullopt); },
       {"float's range"}},
  };
  for (const Bad& b : bad) {
    std::vector<std::string> names = b.names;
    names.insert(names.begin(), "grouped_query_attention");
    EXPECT_TRUE(throws_error_naming([&] { b.call(opt::grouped_query_attention); }, names)) << b.what;
    EXPECT_EQ(error_of([&] { b.call(opt::grouped_query_attention); }),
              error_of([&] { b.call(ref::grouped_query_attention); }))
        << b.what << ": the optimized layer's message differs from the reference's";
  }
}

}  // namespace
}  // namespace tvlab::ch05
