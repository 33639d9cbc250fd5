// Chapter 05, Tensor Product Attention (Zhang et al. 2025): against a double-precision oracle that
// assembles Q, K, V from their factors and then applies RoPE to the assembled tensors (eq. 3.4), on
// prefill and on decode steps over the cache of factors; RoPE on the token factors equals RoPE on the
// assembled tensor (Theorem 3.1); MHA, MQA and GQA as TPA with fixed head factors (section 4); the
// cache size; bad input.

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../common/testing.hpp"
#include "backends.hpp"
#include "kv_test_helpers.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/core/tpa_config.hpp"
#include "tvlab/opt/tpa.hpp"
#include "tvlab/ref/rope.hpp"
#include "tvlab/ref/tpa.hpp"

namespace tvlab::ref {
namespace {

using tvlab::ch05_testing::DVector;
using tvlab::ch05_testing::rotate;
using tvlab::ch05_testing::rows;
using tvlab::testing::matches;
using tvlab::testing::throws_error_naming;

// d = 32, h = 4, d_h = 8, R_Q = 6, R_K = 2, R_V = 3; a small RoPE base so that few positions turn far.
TpaConfig small_config(RopeLayout layout = RopeLayout::half_split) {
  TpaConfig cfg;
  cfg.hidden_size = 32;
  cfg.num_heads = 4;
  cfg.head_dim = 8;
  cfg.q_rank = 6;
  cfg.k_rank = 2;
  cfg.v_rank = 3;
  cfg.rope_theta = 100.0;
  cfg.rope_layout = layout;
  return cfg;
}

// Contextual factor maps of N(0, 1/d) entries, so that factors are of order 1.
TpaFactorMap contextual_map(const TpaConfig& cfg, int rank, Rng& rng) {
  const double sd = 1.0 / std::sqrt(static_cast<double>(cfg.hidden_size));
  return {rng.normal_matrix(cfg.hidden_size, static_cast<std::size_t>(rank * cfg.num_heads), 0.0, sd),
          Tensor2::from_shape({0, 0}),
          rng.normal_matrix(cfg.hidden_size, static_cast<std::size_t>(rank * cfg.head_dim), 0.0, sd)};
}

TpaWeights random_weights(const TpaConfig& cfg, Rng& rng) {
  TpaWeights w;
  w.q = contextual_map(cfg, cfg.q_rank, rng);
  w.k = contextual_map(cfg, cfg.k_rank, rng);
  w.v = contextual_map(cfg, cfg.v_rank, rng);
  const std::size_t hd = static_cast<std::size_t>(cfg.num_heads * cfg.head_dim);
  w.w_o = rng.normal_matrix(hd, cfg.hidden_size, 0.0, 1.0 / std::sqrt(static_cast<double>(hd)));
  return w;
}

// ---- double-precision oracles, sharing no code with the reference ----

struct OracleResult {
  DTensor2 u;
  double score_magnitude = 0;  // the largest sum of |terms| of a scaled score
  double max_abs_value = 0;    // the largest |V|
};

// Causal multi-head attention with RoPE on q and k, from per-token, per-head vectors q[t][i], k[t][i],
// v[t][i] (positions 0 .. T-1), then W^O.
OracleResult attend(const std::vector<std::vector<DVector>>& q, const std::vector<std::vector<DVector>>& k,
                    const std::vector<std::vector<DVector>>& v, const Tensor2& w_o, double theta, RopeLayout layout) {
  const std::size_t T = q.size(), h = q[0].size(), d_h = q[0][0].size(), d_v = v[0][0].size(), d = w_o.shape()[1];
  const double scale = 1.0 / std::sqrt(static_cast<double>(d_h));
  OracleResult r{DTensor2::from_shape({T, d}), 0.0, 0.0};
  r.u.fill(0.0);
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t i = 0; i < h; ++i) {
      const DVector qt = rotate(q[t][i], static_cast<double>(t), theta, layout);
      DVector s(t + 1);
      double m = -1e300;
      for (std::size_t j = 0; j <= t; ++j) {
        const DVector kj = rotate(k[j][i], static_cast<double>(j), theta, layout);
        double dot = 0.0, terms = 0.0;
        for (std::size_t e = 0; e < d_h; ++e) {
          dot += qt[e] * kj[e];
          terms += std::fabs(qt[e] * kj[e]);
        }
        s[j] = scale * dot;
        m = std::max(m, s[j]);
        r.score_magnitude = std::max(r.score_magnitude, scale * terms);
      }
      double l = 0.0;
      for (double sj : s) l += std::exp(sj - m);
      for (std::size_t e = 0; e < d_v; ++e) {
        double o = 0.0;
        for (std::size_t j = 0; j <= t; ++j) {
          o += std::exp(s[j] - m) / l * v[j][i][e];
          r.max_abs_value = std::max(r.max_abs_value, std::fabs(v[j][i][e]));
        }
        for (std::size_t c = 0; c < d; ++c) r.u(t, c) += o * w_o(i * d_v + e, c);
      }
    }
  return r;
}

// X_t = (1/R) sum_r a_r(x_t) (x) b_r(x_t) for every token, as per-token, per-head vectors, in double.
std::vector<std::vector<DVector>> assembled(const Tensor2& x, const TpaFactorMap& map, int rank, const TpaConfig& cfg) {
  const std::size_t T = x.shape()[0], d = cfg.hidden_size, h = cfg.num_heads, d_h = cfg.head_dim;
  std::vector<std::vector<DVector>> out(T, std::vector<DVector>(h, DVector(d_h, 0.0)));
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t r = 0; r < static_cast<std::size_t>(rank); ++r) {
      DVector a(h, 0.0), b(d_h, 0.0);
      for (std::size_t j = 0; j < d; ++j) {
        for (std::size_t i = 0; i < h; ++i)
          a[i] += map.w_a.size() ? static_cast<double>(x(t, j)) * map.w_a(j, r * h + i) : 0.0;
        for (std::size_t e = 0; e < d_h; ++e) b[e] += static_cast<double>(x(t, j)) * map.w_b(j, r * d_h + e);
      }
      if (!map.w_a.size())
        for (std::size_t i = 0; i < h; ++i) a[i] = map.a(r, i);
      for (std::size_t i = 0; i < h; ++i)
        for (std::size_t e = 0; e < d_h; ++e) out[t][i][e] += a[i] * b[e] / rank;
    }
  return out;
}

// TPA as the paper's standard workflow (eq. 3.4): assemble Q, K, V, then RoPE on Q and K, then attention.
OracleResult oracle_tpa(const Tensor2& x, const TpaWeights& w, const TpaConfig& cfg) {
  return attend(assembled(x, w.q, cfg.q_rank, cfg), assembled(x, w.k, cfg.k_rank, cfg), assembled(x, w.v, cfg.v_rank, cfg),
                w.w_o, cfg.rope_theta, cfg.rope_layout);
}

// GQA with RoPE (MHA: groups = h, MQA: groups = 1): head i uses columns [i d_h, (i+1) d_h) of w_q and
// group g = i / (h / groups)'s columns of w_k and w_v.
OracleResult oracle_gqa(const Tensor2& x, const Tensor2& w_q, const Tensor2& w_k, const Tensor2& w_v,
                        const Tensor2& w_o, const TpaConfig& cfg, std::size_t groups) {
  const std::size_t T = x.shape()[0], d = cfg.hidden_size, h = cfg.num_heads, d_h = cfg.head_dim;
  auto head_vectors = [&](const Tensor2& w, bool grouped) {
    std::vector<std::vector<DVector>> out(T, std::vector<DVector>(h, DVector(d_h, 0.0)));
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t i = 0; i < h; ++i) {
        const std::size_t block = grouped ? i / (h / groups) : i;
        for (std::size_t e = 0; e < d_h; ++e)
          for (std::size_t j = 0; j < d; ++j) out[t][i][e] += static_cast<double>(x(t, j)) * w(j, block * d_h + e);
      }
    return out;
  };
  return attend(head_vectors(w_q, false), head_vectors(w_k, true), head_vectors(w_v, true), w_o, cfg.rope_theta,
                cfg.rope_layout);
}

// As chapter 00's attention bound (attention_tolerance: rtol (2M + 1) max|v| for scores of magnitude
// M, rtol = 10 eps sqrt(K)): the factors, their assembly and RoPE are float stages that make the
// score's terms, and W^O after the attention is a random projection that keeps the scale. Measured
// errors are about 1e-7 against atols of about 1e-4.
Tolerance tpa_tolerance(const OracleResult& oracle, const TpaConfig& cfg, std::size_t tokens) {
  return {attention_tolerance(cfg.head_dim, tokens, oracle.score_magnitude, oracle.max_abs_value),
          reduction_rtol(std::max<std::size_t>(cfg.hidden_size, tokens))};
}

// The TPA layer of every backend of the registry that has one (ref, opt).
struct Layer {
  std::string label;
  kv::TpaLayerFn f;
};
const std::vector<Layer>& tpa_layers() {
  static const std::vector<Layer> layers = [] {
    std::vector<Layer> all;
    for (const kv::Backend& b : kv::backends())
      if (b.tpa) all.push_back({b.name + "::tensor_product_attention", b.tpa});
    return all;
  }();
  return layers;
}

// Prefill 4 tokens, then decode one or two at a time: every step gives the oracle's rows, and the
// cache grows by (R_K + R_V)(h + d_h) floats per token. Both RoPE layouts.
TEST(Ch05Tpa, decoding_over_the_cache_of_factors_matches_the_double_oracle) {
  for (const RopeLayout layout : {RopeLayout::half_split, RopeLayout::interleaved}) {
    const TpaConfig cfg = small_config(layout);
    const unsigned long long seed = 601;
    Rng rng(seed);
    const TpaWeights w = random_weights(cfg, rng);
    const std::size_t T = 10;
    const Tensor2 x = rng.normal_matrix(T, cfg.hidden_size);
    const OracleResult oracle = oracle_tpa(x, w, cfg);
    const Tolerance tol = tpa_tolerance(oracle, cfg, T);
    const std::vector<std::pair<std::size_t, std::size_t>> steps = {{0, 4}, {4, 5}, {5, 7}, {7, 8}, {8, 9}, {9, 10}};
    for (const Layer& layer : tpa_layers()) {
      TpaCache cache(cfg);
      for (const auto& [begin, end] : steps) {
        const Tensor2 u = layer.f(rows(x, begin, end), w, cfg, cache);
        EXPECT_TRUE(matches(u, rows(oracle.u, begin, end), tol,
                            {layer.label + ", tokens " + std::to_string(begin) + ".." + std::to_string(end - 1) +
                                 " after " + std::to_string(begin) + " cached, " +
                                 (layout == RopeLayout::half_split ? "half-split" : "interleaved") + " RoPE",
                             {"t", "c"},
                             seed,
                             "",
                             "Q_t = (1/R_Q) sum_r a_r (x) RoPE_t(b_r), likewise K; the usual mistakes: forgetting 1/R, "
                             "rotating the head factors a_r, or the new tokens' RoPE positions not starting at "
                             "cache.tokens()"}));
        EXPECT_EQ(cache.tokens(), end) << layer.label;
        EXPECT_EQ(cache.floats(), end * tpa_cache_floats_per_token(cfg)) << layer.label;
      }
    }
  }
}

// Theorem 3.1: RoPE acts on the head dimension only, so rotating every token factor b_r at position t
// and then assembling equals assembling and then rotating Q_t. Both sides in float from chapter 02's
// apply_rope: a sum of R products, each rotated; rtol 10 eps sqrt(R) on the sum of |terms| (below
// 2 max|a| max|b| R here) is the float tolerance of either order.
TEST(Ch05Tpa, rope_on_the_token_factors_equals_rope_on_the_assembled_tensor) {
  Rng rng(602);
  const std::size_t rank = 3, n = 7, h = 5, d_h = 8;
  const Tensor3 a = rng.normal_tensor(rank, n, h), b = rng.normal_tensor(rank, n, d_h);
  for (const RopeLayout layout : {RopeLayout::half_split, RopeLayout::interleaved}) {
    RopeConfig rope;
    rope.head_dim = static_cast<int>(d_h);
    const RopeFrequencies freqs = rope_frequencies(rope);
    for (const long long first : {0LL, 13LL})
      for (const auto& [name, assemble] : {std::pair{"ref", &tpa_assemble}, std::pair{"opt", &opt::tpa_assemble}}) {
        const Tensor3 factors_rotated = assemble(a, apply_rope(b, freqs, layout, first));
        const Tensor3 tensor_rotated = apply_rope(assemble(a, b), freqs, layout, first);
        const double bound = 2.0 * xt::amax(xt::abs(a))() * xt::amax(xt::abs(b))();
        EXPECT_TRUE(matches(
            factors_rotated, xt::eval(xt::cast<double>(tensor_rotated)), {10 * reduction_rtol(rank) * bound, 0.0},
            {std::string(name) + "::tpa_assemble(a, RoPE(b)) against RoPE(tpa_assemble(a, b)), first position " +
                 std::to_string(first),
             {"h", "t", "e"},
             602,
             "",
             "RoPE_t rotates the head dimension e, the head factors a_r live on the heads i: the two "
             "commute"}));
      }
  }
}

// Section 4: MHA, MQA and GQA are TPA whose head factors are fixed: the query has rank h with
// a_i = h e_i (the 1/h cancels), and the key and value of G groups have rank G with a_j = G mask_j
// (the heads of group j); MQA is G = 1 with a = 1_h; the token factors are the ordinary projections.
// TPA built that way gives, in float, GQA's outputs computed in double (same tolerance as above).
TEST(Ch05Tpa, mha_mqa_and_gqa_are_tpa_with_fixed_head_factors) {
  const unsigned long long seed = 603;
  Rng rng(seed);
  TpaConfig base = small_config();
  base.num_heads = 8;  // the paper's example: h = 8, two groups of four heads
  const std::size_t d = base.hidden_size, h = base.num_heads, d_h = base.head_dim;
  const double sd = 1.0 / std::sqrt(static_cast<double>(d));
  const Tensor2 w_q = rng.normal_matrix(d, h * d_h, 0.0, sd), w_o = rng.normal_matrix(h * d_h, d, 0.0, sd);
  const Tensor2 x = rng.normal_matrix(9, d);
  for (const std::size_t groups : {std::size_t{8}, std::size_t{1}, std::size_t{2}, std::size_t{4}}) {
    const Tensor2 w_k = rng.normal_matrix(d, groups * d_h, 0.0, sd), w_v = rng.normal_matrix(d, groups * d_h, 0.0, sd);
    TpaConfig cfg = base;
    cfg.q_rank = static_cast<int>(h);
    cfg.k_rank = cfg.v_rank = static_cast<int>(groups);
    // a^Q_i = h e_i;  a^K_j = a^V_j = G mask_j (all ones for G = 1)
    Tensor2 a_q = xt::zeros<float>({h, h}), a_kv = xt::zeros<float>({groups, h});
    for (std::size_t i = 0; i < h; ++i) {
      a_q(i, i) = static_cast<float>(h);
      a_kv(i / (h / groups), i) = static_cast<float>(groups);
    }
    const Tensor2 none = Tensor2::from_shape({0, 0});
    const TpaWeights w{{none, a_q, w_q}, {none, a_kv, w_k}, {none, a_kv, w_v}, w_o};
    const OracleResult oracle = oracle_gqa(x, w_q, w_k, w_v, w_o, cfg, groups);
    const std::string name = groups == h ? "MHA" : groups == 1 ? "MQA" : "GQA with " + std::to_string(groups) + " groups";
    for (const Layer& layer : tpa_layers()) {
      TpaCache cache(cfg);
      const Tensor2 u = layer.f(x, w, cfg, cache);
      EXPECT_TRUE(matches(u, oracle.u, tpa_tolerance(oracle, cfg, 9),
                          {layer.label + " with fixed head factors against " + name,
                           {"t", "c"},
                           seed,
                           "",
                           "head i of group j: K_t row i = (1/G) sum_j' (G mask_j')_i b_j' = b_j"}));
    }
  }
}

// Section 3.3: (R_K + R_V)(h + d_h) floats per token against MHA's 2 h d_h; with R_K = R_V = 1 and
// h = d_h the ratio is (2 * 2h) / (2 h^2) = 2 / h.
TEST(Ch05Tpa, cached_floats_per_token_follow_the_closed_form) {
  for (const auto& [h, d_h, r_k, r_v] : {std::array<int, 4>{4, 8, 2, 3}, {32, 128, 2, 2}, {64, 64, 1, 1}}) {
    TpaConfig cfg = small_config();
    cfg.num_heads = h;
    cfg.head_dim = d_h;
    cfg.k_rank = r_k;
    cfg.v_rank = r_v;
    EXPECT_EQ(tpa_cache_floats_per_token(cfg), static_cast<std::size_t>((r_k + r_v) * (h + d_h)));
    if (h == d_h && r_k == 1 && r_v == 1) {
      EXPECT_DOUBLE_EQ(static_cast<double>(tpa_cache_floats_per_token(cfg)) / (2.0 * h * d_h), 2.0 / h);
    }
  }
}

// The saving against MHA's 2 h d_h is 1 - (R_K + R_V)(h + d_h) / (2 h d_h), which depends on the
// ranks: at the paper's decoding benchmark (section 6.2: d_model = 2048, d_h = 64, so h = 32, and
// R_K = R_V = 1) it is 1 - 192/4096 = 95.3%. (The documents' "about 90%" is checked in
// kv_documents_test.cpp.)
TEST(Ch05Tpa, memory_saving_against_mha_depends_on_the_ranks) {
  TpaConfig cfg = small_config();
  cfg.hidden_size = 2048;
  cfg.head_dim = 64;
  cfg.num_heads = cfg.hidden_size / cfg.head_dim;
  auto saving = [&](int r_k, int r_v) {
    cfg.k_rank = r_k;
    cfg.v_rank = r_v;
    return 1.0 - static_cast<double>(tpa_cache_floats_per_token(cfg)) / (2.0 * cfg.num_heads * cfg.head_dim);
  };
  EXPECT_DOUBLE_EQ(saving(1, 1), 1.0 - 2.0 * (32 + 64) / (2.0 * 32 * 64));
  EXPECT_GT(saving(1, 1), 0.95);
  EXPECT_DOUBLE_EQ(saving(2, 2), 1.0 - 384.0 / 4096);  // 90.6%
  EXPECT_DOUBLE_EQ(saving(8, 8), 1.0 - 1536.0 / 4096);  // 62.5%
  EXPECT_LT(saving(8, 8), 0.7) << "larger ranks save less: the saving is not a constant of TPA";
}

TEST(Ch05Tpa, zero_ranks_and_bad_configs_are_errors_naming_the_field) {
  auto with = [](auto change) {
    TpaConfig cfg = small_config();
    change(cfg);
    return cfg;
  };
  const std::vector<std::pair<TpaConfig, std::string>> cases = {
      {with([](TpaConfig& c) { c.q_rank = 0; }), "q_rank"},
      {with([](TpaConfig& c) { c.k_rank = 0; }), "k_rank"},
      {with([](TpaConfig& c) { c.v_rank = -2; }), "v_rank"},
      {with([](TpaConfig& c) { c.num_heads = 0; }), "num_heads"},
      {with([](TpaConfig& c) { c.head_dim = 7; }), "head_dim"},
      {with([](TpaConfig& c) { c.hidden_size = 0; }), "hidden_size"},
      {with([](TpaConfig& c) { c.rope_theta = 0.5; }), "rope_theta"},
  };
  Rng rng(604);
  const TpaConfig good = small_config();
  const TpaWeights w = random_weights(good, rng);
  const Tensor2 x = rng.normal_matrix(2, good.hidden_size);
  for (const auto& [cfg, field] : cases) {
    EXPECT_TRUE(throws_error_naming([&] { TpaCache cache(cfg); }, {"TpaCache", field}));
    EXPECT_TRUE(throws_error_naming([&] { tpa_cache_floats_per_token(cfg); }, {"tpa_cache_floats_per_token", field}));
    for (const Layer& layer : tpa_layers()) {
      TpaCache cache(good);
      EXPECT_TRUE(throws_error_naming([&] { layer.f(x, w, cfg, cache); }, {"tensor_product_attention", field}))
          << layer.label;
    }
  }
}

TEST(Ch05Tpa, bad_inputs_are_errors_and_leave_the_cache_unchanged) {
  Rng rng(605);
  const TpaConfig cfg = small_config();
  const TpaWeights w = random_weights(cfg, rng);
  const Tensor2 x = rng.normal_matrix(3, cfg.hidden_size);
  for (const Layer& layer : tpa_layers()) {
    TpaCache cache(cfg);
    layer.f(x, w, cfg, cache);
    const TpaCache before = cache;
    const std::string fn = "tensor_product_attention";
    auto call = [&](const Tensor2& input, const TpaWeights& weights) { layer.f(input, weights, cfg, cache); };

    TpaWeights bad = w;
    bad.k.w_b = rng.normal_matrix(cfg.hidden_size, cfg.k_rank * cfg.head_dim - 1);
    EXPECT_TRUE(throws_error_naming([&] { call(x, bad); }, {fn, "k.w_b", "k_rank * head_dim"}));
    bad = w;
    bad.q.w_a = rng.normal_matrix(cfg.hidden_size + 1, cfg.q_rank * cfg.num_heads);
    EXPECT_TRUE(throws_error_naming([&] { call(x, bad); }, {fn, "q.w_a", "hidden_size"}));
    bad = w;
    bad.v.a = rng.normal_matrix(cfg.v_rank, cfg.num_heads);  // both contextual and fixed head factors
    EXPECT_TRUE(throws_error_naming([&] { call(x, bad); }, {fn, "v.w_a", "v.a"}));
    bad = w;
    bad.v.w_a = Tensor2::from_shape({0, 0});  // neither
    EXPECT_TRUE(throws_error_naming([&] { call(x, bad); }, {fn, "v.w_a", "v.a"}));
    bad.v.a = rng.normal_matrix(cfg.v_rank + 1, cfg.num_heads);
    EXPECT_TRUE(throws_error_naming([&] { call(x, bad); }, {fn, "v.a", "v_rank"}));
    bad = w;
    bad.w_o(0, 0) = std::nanf("");
    EXPECT_TRUE(throws_error_naming([&] { call(x, bad); }, {fn, "w_o", "non-finite"}));
    EXPECT_TRUE(
        throws_error_naming([&] { call(rng.normal_matrix(2, cfg.hidden_size + 3), w); }, {fn, "x", "hidden_size"}));
    Tensor2 with_inf = x;
    with_inf(2, 0) = std::numeric_limits<float>::infinity();
    EXPECT_TRUE(throws_error_naming([&] { call(with_inf, w); }, {fn, "x", "non-finite"}));
    EXPECT_TRUE(throws_error_naming(
        [&] {
          call(Tensor2::from_shape({0, static_cast<std::size_t>(cfg.hidden_size)}), w);
        },
        {fn, "x", "empty"}));
    TpaConfig other = cfg;
    other.k_rank = 3;
    TpaCache foreign(other);
    EXPECT_TRUE(throws_error_naming([&] { layer.f(x, w, cfg, foreign); }, {fn, "cache.a_k", "k_rank"}));
    // a late error: scores beyond float's range, found by the attention after the factors were made
    EXPECT_TRUE(
        throws_error_naming([&] { call(rng.normal_matrix(2, cfg.hidden_size, 0.0, 1e18), w); }, {fn, "too large"}));
    EXPECT_TRUE(cache.tokens() == before.tokens() && cache.a_k == before.a_k && cache.b_k == before.b_k &&
                cache.a_v == before.a_v && cache.b_v == before.b_v)
        << layer.label << ": a call that throws must leave the cache as it was";
  }

  for (const auto assemble : {&tpa_assemble, &opt::tpa_assemble}) {
    EXPECT_TRUE(throws_error_naming([&] { assemble(rng.normal_tensor(2, 3, 4), rng.normal_tensor(3, 3, 8)); },
                                    {"tpa_assemble", "b", "ranks"}));
    EXPECT_TRUE(throws_error_naming([&] { assemble(rng.normal_tensor(2, 3, 4), rng.normal_tensor(2, 4, 8)); },
                                    {"tpa_assemble", "b", "tokens"}));
  }
}

}  // namespace
}  // namespace tvlab::ref
