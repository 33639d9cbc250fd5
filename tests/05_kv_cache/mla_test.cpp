// Chapter 05, Multi-head Latent Attention (DeepSeek-V2 section 2.1): both paths (expanded keys and
// values in the cache, or only the latent and the shared RoPE key with the up-projections absorbed)
// against a double-precision oracle written here from the paper's equations, on prefill and on
// decode steps; the cache sizes against their closed forms; why RoPE has to be decoupled; bad input.

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include "../common/testing.hpp"
#include "backends.hpp"
#include "kv_test_helpers.hpp"
#include "tvlab/core/mla_config.hpp"
#include "tvlab/core/model_config.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/opt/mla.hpp"
#include "tvlab/ref/mla.hpp"
#include "tvlab/ref/rope.hpp"

namespace tvlab::ref {
namespace {

using tvlab::ch05_testing::DVector;
using tvlab::ch05_testing::random_mla_weights;
using tvlab::ch05_testing::rotate;
using tvlab::ch05_testing::rows;
using tvlab::testing::matches;
using tvlab::testing::reduction_rtol;
using tvlab::testing::throws_error_naming;

// A small MLA layer: d = 32, n_h = 4, d_c' = 12, d_c = 8, d_h = 8, d_h^R = 4, and d_v = 6 unlike d_h so
// that a value width mixed up with a key width cannot pass.
MlaConfig small_config(bool compress_queries, RopeLayout layout = RopeLayout::interleaved) {
  MlaConfig cfg;
  cfg.hidden_size = 32;
  cfg.num_heads = 4;
  cfg.q_lora_rank = compress_queries ? std::optional<int>(12) : std::nullopt;
  cfg.kv_lora_rank = 8;
  cfg.qk_nope_head_dim = 8;
  cfg.qk_rope_head_dim = 4;
  cfg.v_head_dim = 6;
  cfg.rope_layout = layout;
  // A small base, so that the few positions of a test turn the pairs by large angles.
  cfg.rope_theta = 100.0;
  return cfg;
}

// ---- The double-precision oracle, from DeepSeek-V2's equations 9-19 (and the RMSNorms of its
// section 3.1.2), sharing no code with the reference. ----

// y = x W for one row x `[a]` and W `[a, b]`, in double; columns [first, first + count).
DVector times(const DVector& x, const Tensor2& w, std::size_t first, std::size_t count) {
  DVector y(count, 0.0);
  for (std::size_t c = 0; c < count; ++c)
    for (std::size_t k = 0; k < x.size(); ++k) y[c] += x[k] * w(k, first + c);
  return y;
}

// RMSNorm: gamma_j x_j / sqrt(mean(x^2) + eps).
DVector rms(const DVector& x, const Tensor1& gamma, double eps) {
  double mean_square = 0.0;
  for (double v : x) mean_square += v * v / static_cast<double>(x.size());
  DVector y(x.size());
  for (std::size_t j = 0; j < x.size(); ++j) y[j] = gamma(j) * x[j] / std::sqrt(mean_square + eps);
  return y;
}

double dot(const DVector& a, const DVector& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

struct OracleResult {
  DTensor2 u;                  // [T, d]
  double score_magnitude = 0;  // the largest sum of |terms| of a scaled score
  double max_abs_value = 0;    // the largest |v^C|
};

// Causal MLA over the whole sequence x `[T, d]` at positions 0 .. T-1, with keys and values expanded.
OracleResult oracle_mla(const Tensor2& x, const MlaWeights& w, const MlaConfig& cfg) {
  const std::size_t T = x.shape()[0], d = cfg.hidden_size, h = cfg.num_heads;
  const std::size_t d_h = cfg.qk_nope_head_dim, d_r = cfg.qk_rope_head_dim, d_v = cfg.v_head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d_h + d_r));
  // per token t and head i: q^C, q^R, k^C, v^C; per token: k^R
  std::vector<std::vector<DVector>> qc(T), qr(T), kc(T), vc(T);
  std::vector<DVector> kr(T);
  for (std::size_t t = 0; t < T; ++t) {
    DVector h_t(d);
    for (std::size_t j = 0; j < d; ++j) h_t[j] = x(t, j);
    const DVector c_q = cfg.q_lora_rank
                            ? rms(times(h_t, w.w_dq, 0, static_cast<std::size_t>(*cfg.q_lora_rank)), w.q_norm,
                                  cfg.rms_norm_eps)
                            : h_t;
    const DVector c_kv = rms(times(h_t, w.w_dkv, 0, cfg.kv_lora_rank), w.kv_norm, cfg.rms_norm_eps);
    kr[t] = rotate(times(h_t, w.w_kr, 0, d_r), static_cast<double>(t), cfg.rope_theta, cfg.rope_layout);
    for (std::size_t i = 0; i < h; ++i) {
      qc[t].push_back(times(c_q, w.w_uq, i * d_h, d_h));
      qr[t].push_back(rotate(times(c_q, w.w_qr, i * d_r, d_r), static_cast<double>(t), cfg.rope_theta, cfg.rope_layout));
      kc[t].push_back(times(c_kv, w.w_uk, i * d_h, d_h));
      vc[t].push_back(times(c_kv, w.w_uv, i * d_v, d_v));
    }
  }
  OracleResult r{DTensor2::from_shape({T, d}), 0.0, 0.0};
  r.u.fill(0.0);
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t i = 0; i < h; ++i) {
      // s_j = (q^C . k^C_j + q^R . k^R_j) / sqrt(d_h + d_h^R) for j <= t, then softmax and the weighted values
      DVector s(t + 1);
      double m = -1e300;
      for (std::size_t j = 0; j <= t; ++j) {
        s[j] = scale * (dot(qc[t][i], kc[j][i]) + dot(qr[t][i], kr[j]));
        m = std::max(m, s[j]);
        double terms = 0.0;
        for (std::size_t e = 0; e < d_h; ++e) terms += std::fabs(qc[t][i][e] * kc[j][i][e]);
        for (std::size_t e = 0; e < d_r; ++e) terms += std::fabs(qr[t][i][e] * kr[j][e]);
        r.score_magnitude = std::max(r.score_magnitude, scale * terms);
      }
      double l = 0.0;
      for (double sj : s) l += std::exp(sj - m);
      DVector o(d_v, 0.0);
      for (std::size_t j = 0; j <= t; ++j)
        for (std::size_t e = 0; e < d_v; ++e) {
          o[e] += std::exp(s[j] - m) / l * vc[j][i][e];
          r.max_abs_value = std::max(r.max_abs_value, std::fabs(vc[j][i][e]));
        }
      // u_t = W^O [o_{t,1}; ...; o_{t,n_h}]
      for (std::size_t c = 0; c < d; ++c)
        for (std::size_t e = 0; e < d_v; ++e) r.u(t, c) += o[e] * w.w_o(i * d_v + e, c);
    }
  return r;
}

// The float reference rounds every stage to float (the projections, the norms, RoPE, the keys, the
// attention output) and sums in double. The error that matters is the attention's: a score of
// magnitude M (its sum of |terms|) carries a relative error of rtol = 10 eps sqrt(K) from the float
// stages before it, and moves an output by at most rtol max|v| (2M + 1) (chapter 00's
// attention_tolerance); the stages before the scores only make M's terms, and W^O after them is a
// random projection that keeps the scale. So atol = attention_tolerance(d_h + d_h^R, tokens, M,
// max|v|), rtol = 10 eps sqrt(max(d, tokens)). Measured: at most 2.5e-7 against an atol of about
// 1.2e-4 here; the bound assumes every rounding lines up.
Tolerance mla_tolerance(const OracleResult& oracle, const MlaConfig& cfg, std::size_t tokens) {
  return {attention_tolerance(cfg.qk_nope_head_dim + cfg.qk_rope_head_dim, tokens, oracle.score_magnitude,
                              oracle.max_abs_value),
          reduction_rtol(std::max<std::size_t>(cfg.hidden_size, tokens))};
}

// Both paths of every backend of the registry that has them (ref, opt): `name` is the function's
// (what its errors start with), `label` says whose it is.
struct Path {
  std::string name, label;
  MlaPath path;
  kv::MlaLayerFn f;
};
const std::vector<Path>& layer_paths() {
  static const std::vector<Path> paths = [] {
    std::vector<Path> all;
    for (const kv::Backend& b : kv::backends()) {
      if (b.mla_naive) all.push_back({"mla_naive", b.name + "::mla_naive", MlaPath::naive, b.mla_naive});
      if (b.mla_absorbed) all.push_back({"mla_absorbed", b.name + "::mla_absorbed", MlaPath::absorbed, b.mla_absorbed});
    }
    return all;
  }();
  return paths;
}

struct Variant {
  const char* label;
  bool compress_queries;
  RopeLayout layout;
};
const Variant kVariants[] = {{"query compression (V2/V3 form), interleaved RoPE", true, RopeLayout::interleaved},
                             {"no query compression (V2-Lite form), interleaved RoPE", false, RopeLayout::interleaved},
                             {"query compression, half-split RoPE", true, RopeLayout::half_split}};

// The whole sequence at once on an empty cache: both paths give the oracle's causal MLA, whose
// keys and values are expanded per head as in the paper's equations.
TEST(Ch05Mla, both_paths_match_the_double_oracle_on_prefill) {
  for (const Variant& variant : kVariants) {
    const MlaConfig cfg = small_config(variant.compress_queries, variant.layout);
    const unsigned long long seed = 501;
    Rng rng(seed);
    const MlaWeights w = random_mla_weights(cfg, rng);
    const Tensor2 x = rng.normal_matrix(11, cfg.hidden_size);
    const OracleResult oracle = oracle_mla(x, w, cfg);
    for (const Path& path : layer_paths()) {
      MlaCache cache(cfg, path.path);
      const Tensor2 u = path.f(x, w, cfg, cache);
      EXPECT_TRUE(
          matches(u, oracle.u, mla_tolerance(oracle, cfg, 11),
                  {path.label + ", prefill of 11 tokens, " + variant.label,
                   {"t", "c"},
                   seed,
                   "",
                   "u_t = W^O [o_t1; ...], o_ti = sum_{j<=t} softmax((q^C.k^C + q^R.k^R)/sqrt(d_h + d_h^R)) v_ji; "
                   "the usual mistakes: the scale 1/sqrt(d_h) instead of 1/sqrt(d_h + d_h^R), k^R from the "
                   "latent instead of h_t, RoPE at the wrong positions"}));
      EXPECT_EQ(cache.tokens(), 11u) << path.label;
    }
  }
}

// Prefill 5 tokens, then decode one token at a time (and once two together): every step's output is
// the oracle's row for that position, computed over the whole sequence; the cache grows by the
// closed-form count of floats per token.
TEST(Ch05Mla, decoding_against_the_cache_equals_the_full_sequence) {
  for (const Variant& variant : kVariants) {
    const MlaConfig cfg = small_config(variant.compress_queries, variant.layout);
    const unsigned long long seed = 502;
    Rng rng(seed);
    const MlaWeights w = random_mla_weights(cfg, rng);
    const std::size_t T = 12;
    const Tensor2 x = rng.normal_matrix(T, cfg.hidden_size);
    const OracleResult oracle = oracle_mla(x, w, cfg);
    const Tolerance tol = mla_tolerance(oracle, cfg, T);
    // steps: [0, 5) prefill, then 5, 6, [7, 9), 9, 10, 11
    const std::vector<std::pair<std::size_t, std::size_t>> steps = {{0, 5}, {5, 6},   {6, 7},  {7, 9},
                                                                    {9, 10}, {10, 11}, {11, 12}};
    for (const Path& path : layer_paths()) {
      MlaCache cache(cfg, path.path);
      for (const auto& [begin, end] : steps) {
        const Tensor2 u = path.f(rows(x, begin, end), w, cfg, cache);
        EXPECT_TRUE(matches(u, rows(oracle.u, begin, end), tol,
                            {path.label + ", tokens " + std::to_string(begin) + ".." + std::to_string(end - 1) +
                                 " after " + std::to_string(begin) + " cached, " + variant.label,
                             {"t", "c"},
                             seed,
                             "",
                             "the new tokens sit at positions cache.tokens() onwards (RoPE) and see every cached "
                             "position up to their own"}));
        EXPECT_EQ(cache.tokens(), end) << path.label;
        EXPECT_EQ(cache.floats(), end * mla_cache_floats_per_token(cfg, path.path)) << path.label;
      }
    }
  }
}

// opt::mla_project (SGEMMs, chapter 01's and 02's optimized RMSNorm and RoPE) gives the reference's
// projections, which accumulate in double and round once. Each entry is a float sum over at most
// K = max(d, d_c') products through at most two projections and a norm; its rounding is within
// reduction_rtol(K) (10 eps sqrt(K)) of the sum of |terms|, which for these N(0, 1/fan_in) weights
// and unit inputs is of the order of the largest entry: atol = rtol = 2 reduction_rtol(K) times it.
TEST(Ch05Mla, optimized_projections_match_the_reference) {
  for (const Variant& variant : kVariants) {
    const MlaConfig cfg = small_config(variant.compress_queries, variant.layout);
    const unsigned long long seed = 506;
    Rng rng(seed);
    const MlaWeights w = random_mla_weights(cfg, rng);
    const Tensor2 x = rng.normal_matrix(5, cfg.hidden_size);
    const MlaProjections expected = mla_project(x, w, cfg, 7), got = opt::mla_project(x, w, cfg, 7);
    const double rtol =
        2.0 * reduction_rtol(static_cast<std::size_t>(std::max(cfg.hidden_size, cfg.q_lora_rank.value_or(0))));
    auto check = [&](const auto& actual, const auto& reference, const std::string& name,
                     std::vector<std::string> axes) {
      const auto as_double = xt::eval(xt::cast<double>(reference));
      EXPECT_TRUE(
          matches(actual, as_double, {rtol * xt::amax(xt::abs(as_double))(), rtol},
                  {"opt::mla_project's " + name + " against ref::mla_project's, first position 7, " + variant.label,
                   axes, seed, "", "the same projections, RMSNorms and RoPE positions as the reference"}));
    };
    check(got.q_nope, expected.q_nope, "q_nope", {"i", "t", "e"});
    check(got.q_rope, expected.q_rope, "q_rope", {"i", "t", "e"});
    check(got.latents, expected.latents, "latents", {"t", "c"});
    check(got.rope_keys, expected.rope_keys, "rope_keys", {"t", "e"});
  }
  const MlaConfig cfg = small_config(true);
  Rng rng(507);
  const MlaWeights w = random_mla_weights(cfg, rng);
  EXPECT_TRUE(throws_error_naming([&] { opt::mla_project(rng.normal_matrix(2, cfg.hidden_size), w, cfg, -1); },
                                  {"mla_project", "first_position"}));
  EXPECT_TRUE(throws_error_naming([&] { opt::absorbed_qk_matrix(w, cfg, -1); }, {"absorbed_qk_matrix", "head"}));
}

// k^R_t is one vector for all heads (eq. 15): in the naive cache, the last d_h^R coordinates of every
// head's key are the same numbers; and the absorbed cache holds them once.
TEST(Ch05Mla, the_rope_key_is_shared_by_every_head) {
  const MlaConfig cfg = small_config(true);
  Rng rng(503);
  const MlaWeights w = random_mla_weights(cfg, rng);
  const Tensor2 x = rng.normal_matrix(6, cfg.hidden_size);
  MlaCache naive(cfg, MlaPath::naive), absorbed(cfg, MlaPath::absorbed);
  mla_naive(x, w, cfg, naive);
  mla_absorbed(x, w, cfg, absorbed);
  const std::size_t d_h = cfg.qk_nope_head_dim;
  for (std::size_t i = 0; i < static_cast<std::size_t>(cfg.num_heads); ++i)
    for (std::size_t t = 0; t < 6; ++t)
      for (std::size_t e = 0; e < static_cast<std::size_t>(cfg.qk_rope_head_dim); ++e)
        ASSERT_EQ(naive.keys(i, t, d_h + e), absorbed.rope_keys(t, e)) << "head " << i << ", token " << t;
}

// The DeepSeek layer configs take the named models' sizes (model_config.cpp, from each config.json);
// V2-Lite's null q_lora_rank becomes "no query latent".
TEST(Ch05Mla, the_deepseek_layer_configs_carry_the_named_models_sizes) {
  const std::pair<MlaConfig, const char*> pairs[] = {
      {deepseek_v2_mla(), "deepseek-v2"}, {deepseek_v2_lite_mla(), "deepseek-v2-lite"}, {deepseek_v3_mla(), "deepseek-v3"}};
  for (const auto& [cfg, name] : pairs) {
    const ModelConfig& m = named_model_config(name);
    EXPECT_EQ(cfg.hidden_size, m.hidden_size) << name;
    EXPECT_EQ(cfg.num_heads, m.num_attention_heads) << name;
    EXPECT_EQ(cfg.q_lora_rank.value_or(0), m.q_lora_rank) << name;
    EXPECT_EQ(cfg.kv_lora_rank, m.kv_lora_rank) << name;
    EXPECT_EQ(cfg.qk_nope_head_dim, m.qk_nope_head_dim) << name;
    EXPECT_EQ(cfg.qk_rope_head_dim, m.qk_rope_head_dim) << name;
    EXPECT_EQ(cfg.v_head_dim, m.v_head_dim) << name;
    EXPECT_EQ(cfg.num_hidden_layers, m.num_hidden_layers) << name;
  }
  EXPECT_FALSE(deepseek_v2_lite_mla().q_lora_rank.has_value());
  EXPECT_EQ(deepseek_v2_mla().q_lora_rank, 1536);
  EXPECT_EQ(deepseek_v3_mla().hidden_size, 7168);
}

// The cache sizes per token: n_h (d_h + d_h^R + d_v) floats expanded, d_c + d_h^R absorbed (DeepSeek-V2
// Table 1: (d_c + d_h^R) l for l layers), and the paper's remark that with d_c = 4 d_h and
// d_h^R = d_h / 2 this equals GQA with 2.25 groups (2.25 * 2 d_h), for the three named models.
TEST(Ch05Mla, cached_floats_per_token_follow_the_closed_forms) {
  for (const MlaConfig& cfg : {small_config(true), deepseek_v2_mla(), deepseek_v2_lite_mla(), deepseek_v3_mla()}) {
    const std::size_t h = cfg.num_heads, d_h = cfg.qk_nope_head_dim, d_r = cfg.qk_rope_head_dim;
    EXPECT_EQ(mla_cache_floats_per_token(cfg, MlaPath::naive), h * (d_h + d_r + cfg.v_head_dim));
    EXPECT_EQ(mla_cache_floats_per_token(cfg, MlaPath::absorbed), static_cast<std::size_t>(cfg.kv_lora_rank) + d_r);
    EXPECT_DOUBLE_EQ(mla_cache_bytes_per_token(cfg, MlaPath::absorbed, 2.0),
                     2.0 * static_cast<double>(cfg.kv_lora_rank + cfg.qk_rope_head_dim));
  }
  for (const MlaConfig& cfg : {deepseek_v2_mla(), deepseek_v2_lite_mla(), deepseek_v3_mla()}) {
    EXPECT_EQ(cfg.kv_lora_rank, 4 * cfg.qk_nope_head_dim);
    EXPECT_EQ(2 * cfg.qk_rope_head_dim, cfg.qk_nope_head_dim);
    EXPECT_DOUBLE_EQ(static_cast<double>(mla_cache_floats_per_token(cfg, MlaPath::absorbed)),
                     2.25 * 2.0 * cfg.qk_nope_head_dim);
  }
}

// DeepSeek-V2/V3 (one layer): the absorbed path caches d_c + d_h^R = 576 values a token, the latent
// and one RoPE key shared by every head; MHA with the same heads would cache 2 n_h d_h = 32,768. (The
// documents' figures for these, and their errata, are checked in kv_documents_test.cpp.)
TEST(Ch05Mla, deepseek_configs_cache_the_latent_and_one_rope_key_per_token) {
  for (const MlaConfig& cfg : {deepseek_v2_mla(), deepseek_v3_mla()}) {
    const double mla_values = static_cast<double>(mla_cache_floats_per_token(cfg, MlaPath::absorbed));
    EXPECT_EQ(mla_values, 512.0 + 64.0);
    EXPECT_DOUBLE_EQ(mla_cache_bytes_per_token(cfg, MlaPath::absorbed, 2.0), 2.0 * mla_values);
    // the decoupled RoPE key's share: d_h^R values per token, not n_h d_h^R
    EXPECT_EQ(mla_cache_floats_per_token(cfg, MlaPath::absorbed) - static_cast<std::size_t>(cfg.kv_lora_rank),
              static_cast<std::size_t>(cfg.qk_rope_head_dim));
  }
}

// Weight absorption as the documents write it (000 L201): q^C . k^C = c_Q^T (W^UQ^T W^UK) c_KV,
// one position-independent matrix per head. Put RoPE on the content parts instead (rotate q^C at
// position m and k^C at n): the score becomes q^C . R_(n-m) k^C, so the matrix between W^UQ and W^UK
// depends on the offset n - m. The absorbed matrix built for one offset (W^UK's rows rotated by that
// offset) reproduces the rotated scores at every pair of positions with that offset, and not at another
// offset: no single matrix serves all positions, which is why MLA keeps RoPE in a separate part.
TEST(Ch05Mla, rope_on_the_content_part_defeats_absorption) {
  const MlaConfig cfg = small_config(true);
  Rng rng(504);
  const MlaWeights w = random_mla_weights(cfg, rng);
  const std::size_t q_in = *cfg.q_lora_rank, d_c = cfg.kv_lora_rank, d_h = cfg.qk_nope_head_dim;
  const int head = 1;
  const Tensor1 c_q = rng.normal_vector(q_in), c_kv = rng.normal_vector(d_c);
  RopeConfig rope_cfg;
  rope_cfg.head_dim = static_cast<int>(d_h);
  rope_cfg.rope_theta = cfg.rope_theta;
  const RopeFrequencies freqs = rope_frequencies(rope_cfg);

  // q^C = W^UQ_i c_Q and k^C = W^UK_i c_KV of head 1, in double
  DVector qc(d_h, 0.0), kc(d_h, 0.0);
  for (std::size_t e = 0; e < d_h; ++e) {
    for (std::size_t a = 0; a < q_in; ++a) qc[e] += static_cast<double>(c_q(a)) * w.w_uq(a, head * d_h + e);
    for (std::size_t c = 0; c < d_c; ++c) kc[e] += static_cast<double>(c_kv(c)) * w.w_uk(c, head * d_h + e);
  }
  // the true score with RoPE on the content: RoPE_m(q^C) . RoPE_n(k^C)
  auto rotated_score = [&](long long m, long long n) {
    return dot(rotate(qc, static_cast<double>(m), cfg.rope_theta, cfg.rope_layout),
               rotate(kc, static_cast<double>(n), cfg.rope_theta, cfg.rope_layout));
  };
  // the absorbed matrix for offset delta: W^UQ_i^T R_delta W^UK_i, i.e. every row of W^UK_i rotated by
  // delta (chapter 02's apply_rope on [d_c rows as heads, 1 position, d_h]) and then absorbed
  auto absorbed_for_offset = [&](long long delta) {
    Tensor3 uk_rows = Tensor3::from_shape({d_c, 1, d_h});
    for (std::size_t c = 0; c < d_c; ++c)
      for (std::size_t e = 0; e < d_h; ++e) uk_rows(c, 0, e) = w.w_uk(c, head * d_h + e);
    const Tensor3 turned = apply_rope(uk_rows, freqs, cfg.rope_layout, delta);
    MlaWeights rotated = w;
    for (std::size_t c = 0; c < d_c; ++c)
      for (std::size_t e = 0; e < d_h; ++e) rotated.w_uk(c, head * d_h + e) = turned(c, 0, e);
    return absorbed_qk_matrix(rotated, cfg, head);
  };
  auto bilinear = [&](const Tensor2& m) {
    double s = 0.0;
    for (std::size_t a = 0; a < q_in; ++a)
      for (std::size_t c = 0; c < d_c; ++c) s += static_cast<double>(c_q(a)) * m(a, c) * c_kv(c);
    return s;
  };
  // Without any rotation the absorbed form is exact: the documents' identity, for the reference's
  // matrix and the optimized one (one SGEMM).
  for (const auto& [name, absorbed_matrix] :
       {std::pair{"ref", &absorbed_qk_matrix}, std::pair{"opt", &opt::absorbed_qk_matrix}})
    EXPECT_NEAR(bilinear(absorbed_matrix(w, cfg, head)), dot(qc, kc), 1e-4 * (1 + std::fabs(dot(qc, kc))))
        << name << "::absorbed_qk_matrix of head " << head;

  // float matrices of sums of d_h products: relative 1e-4 of the sum of |terms| is generous.
  double magnitude = 0.0;
  for (std::size_t e = 0; e < d_h; ++e) magnitude += std::fabs(qc[e]) * std::sqrt(dot(kc, kc));
  const double tol = 1e-4 * magnitude;
  for (const long long delta : {0LL, 3LL}) {
    const double absorbed = bilinear(absorbed_for_offset(delta));
    // every (m, n) with n - m = delta agrees ...
    for (const long long m : {0LL, 2LL, 7LL, 20LL})
      EXPECT_NEAR(absorbed, rotated_score(m, m + delta), tol) << "offset " << delta << ", m = " << m;
    // ... and the pairs with another offset do not (their scores differ from it by far more than the tolerance)
    double largest_miss = 0.0;
    for (const long long other : {1LL, 2LL, 5LL, -4LL})
      if (other != delta) largest_miss = std::max(largest_miss, std::fabs(absorbed - rotated_score(4, 4 + other)));
    EXPECT_GT(largest_miss, 100 * tol) << "the matrix absorbed for offset " << delta
                                       << " should not reproduce the scores at other offsets";
  }
}

// ---- bad input: each names the function and the parameter, and leaves the cache as it was ----

TEST(Ch05Mla, bad_configs_are_errors_naming_the_field) {
  auto with = [](auto change) {
    MlaConfig cfg = small_config(true);
    change(cfg);
    return cfg;
  };
  const std::vector<std::pair<MlaConfig, std::string>> cases = {
      {with([](MlaConfig& c) { c.hidden_size = 0; }), "hidden_size"},
      {with([](MlaConfig& c) { c.num_heads = -1; }), "num_heads"},
      {with([](MlaConfig& c) { c.q_lora_rank = 0; }), "q_lora_rank"},
      {with([](MlaConfig& c) { c.kv_lora_rank = 0; }), "kv_lora_rank"},
      {with([](MlaConfig& c) { c.qk_nope_head_dim = 0; }), "qk_nope_head_dim"},
      {with([](MlaConfig& c) { c.qk_rope_head_dim = 5; }), "qk_rope_head_dim"},
      {with([](MlaConfig& c) { c.v_head_dim = 0; }), "v_head_dim"},
      {with([](MlaConfig& c) { c.rms_norm_eps = -1; }), "rms_norm_eps"},
      {with([](MlaConfig& c) { c.rope_theta = 1.0; }), "rope_theta"},
      {with([](MlaConfig& c) { c.num_hidden_layers = 0; }), "num_hidden_layers"},
  };
  for (const auto& [cfg, field] : cases) {
    EXPECT_TRUE(throws_error_naming([&] { MlaCache cache(cfg, MlaPath::naive); }, {"MlaCache", field}));
    EXPECT_TRUE(throws_error_naming([&] { mla_softmax_scale(cfg); }, {"mla_softmax_scale", field}));
    EXPECT_TRUE(throws_error_naming([&] { mla_cache_floats_per_token(cfg, MlaPath::absorbed); },
                                    {"mla_cache_floats_per_token", field}));
  }
  EXPECT_TRUE(throws_error_naming([] { mla_cache_bytes_per_token(small_config(true), MlaPath::naive, 0.0); },
                                  {"mla_cache_bytes_per_token", "bytes_per_element"}));
}

TEST(Ch05Mla, bad_inputs_are_errors_and_leave_the_cache_unchanged) {
  const MlaConfig cfg = small_config(true);
  Rng rng(505);
  const MlaWeights w = random_mla_weights(cfg, rng);
  const Tensor2 x = rng.normal_matrix(3, cfg.hidden_size);
  for (const Path& path : layer_paths()) {
    MlaCache cache(cfg, path.path);
    path.f(x, w, cfg, cache);
    const MlaCache before = cache;
    auto unchanged = [&] {
      return cache.tokens() == before.tokens() && cache.keys == before.keys && cache.values == before.values &&
             cache.latents == before.latents && cache.rope_keys == before.rope_keys;
    };
    const std::string fn = path.name;
    MlaWeights bad_uk = w;
    bad_uk.w_uk = rng.normal_matrix(cfg.kv_lora_rank, cfg.num_heads * cfg.qk_nope_head_dim - 1);
    EXPECT_TRUE(throws_error_naming([&] { path.f(x, bad_uk, cfg, cache); }, {fn, "w_uk", "num_heads * qk_nope_head_dim"}));
    MlaWeights bad_norm = w;
    bad_norm.kv_norm = rng.normal_vector(cfg.kv_lora_rank + 1);
    EXPECT_TRUE(throws_error_naming([&] { path.f(x, bad_norm, cfg, cache); }, {fn, "kv_norm", "kv_lora_rank"}));
    MlaWeights nan_kr = w;
    nan_kr.w_kr(1, 1) = std::nanf("");
    EXPECT_TRUE(throws_error_naming([&] { path.f(x, nan_kr, cfg, cache); }, {fn, "w_kr", "non-finite"}));
    // weights of a V2-Lite-shaped layer (no w_dq) given to a layer with query compression
    MlaWeights no_dq = w;
    no_dq.w_dq = Tensor2::from_shape({0, 0});
    EXPECT_TRUE(throws_error_naming([&] { path.f(x, no_dq, cfg, cache); }, {fn, "w_dq", "hidden_size"}));
    const Tensor2 narrow = rng.normal_matrix(2, cfg.hidden_size - 1);
    EXPECT_TRUE(throws_error_naming([&] { path.f(narrow, w, cfg, cache); }, {fn, "x", "hidden_size"}));
    Tensor2 with_nan = x;
    with_nan(0, 3) = std::nanf("");
    EXPECT_TRUE(throws_error_naming([&] { path.f(with_nan, w, cfg, cache); }, {fn, "x", "non-finite"}));
    const Tensor2 empty = Tensor2::from_shape({0, static_cast<std::size_t>(cfg.hidden_size)});
    EXPECT_TRUE(throws_error_naming([&] { path.f(empty, w, cfg, cache); }, {fn, "x", "empty"}));
    // a cache of the other path, and one made for another shape
    MlaCache other(cfg, path.path == MlaPath::naive ? MlaPath::absorbed : MlaPath::naive);
    EXPECT_TRUE(throws_error_naming([&] { path.f(x, w, cfg, other); }, {fn, "cache", "expected a " + to_string(path.path)}));
    MlaConfig wider = cfg;
    wider.kv_lora_rank = 10;
    wider.num_heads = 5;
    MlaCache foreign(wider, path.path);
    EXPECT_TRUE(throws_error_naming([&] { path.f(x, w, cfg, foreign); }, {fn, "cache."}));
    EXPECT_TRUE(unchanged()) << path.label << ": a call that throws must leave the cache as it was";
  }
  // A late error: without query compression, hidden states of 1e30 give RoPE queries and keys of
  // about 1e30 whose dot products (about 1e60) leave float's range; the attention refuses them after
  // the keys were computed (the reference and the absorbed kernel from a bound on q . k, the naive
  // optimized path when its scores overflow).
  const MlaConfig lite = small_config(false);
  const MlaWeights lite_w = random_mla_weights(lite, rng);
  const Tensor2 huge = rng.normal_matrix(2, lite.hidden_size, 0.0, 1e30);
  for (const Path& path : layer_paths()) {
    MlaCache cache(lite, path.path);
    path.f(x, lite_w, lite, cache);
    const MlaCache before = cache;
    EXPECT_TRUE(throws_error_naming([&] { path.f(huge, lite_w, lite, cache); }, {path.name, "x", "too large"}));
    EXPECT_TRUE(cache.tokens() == before.tokens() && cache.keys == before.keys && cache.values == before.values &&
                cache.latents == before.latents && cache.rope_keys == before.rope_keys)
        << path.label << ": the cache grows only when the whole call succeeds";
  }
  EXPECT_TRUE(throws_error_naming([&] { absorbed_qk_matrix(w, cfg, 4); }, {"absorbed_qk_matrix", "head"}));
  EXPECT_TRUE(throws_error_naming([&] { mla_project(x, w, cfg, -1); }, {"mla_project", "first_position"}));
}

}  // namespace
}  // namespace tvlab::ref
