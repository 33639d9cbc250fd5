// Chapter 05, the attention core of MLA's absorbed decode step (DeepSeek-V2 section 2.1.2): the
// reference and every optimized version against a double-precision oracle, at scaled-down and at
// DeepSeek's real widths; the free slots of a cache never read; the split-K merge; the core,
// up-projected by W^UV and W^O, equal to `mla_absorbed`'s decode step; bad input.

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "../common/testing.hpp"
#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/mla_config.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/opt/mla_decode.hpp"
#include "tvlab/ref/attention.hpp"
#include "tvlab/ref/mla.hpp"
#include "tvlab/ref/mla_decode.hpp"
#include "kv_test_helpers.hpp"

namespace tvlab {
namespace {

using ref::MlaDecodeAttention;
using testing::matches;
using testing::throws_error_naming;

using DecodeFunction = MlaDecodeAttention (*)(const Tensor2&, const Tensor2&, const Tensor2&, std::size_t, double);

struct Version {
  std::string name;
  DecodeFunction f;
};

// gtest prints a parameter through PrintTo: the version's name, not its bytes.
void PrintTo(const Version& v, std::ostream* out) { *out << v.name; }

// The reference, every numbered optimized version, and the headline.
std::vector<Version> all_versions() {
  std::vector<Version> versions = {{"ref", &ref::mla_absorbed_decode_attention}};
  for (const auto& variant : opt::mla_decode_variants()) versions.push_back({"opt_" + variant.name, variant.function});
  versions.push_back({"opt", &opt::mla_absorbed_decode_attention});
  return versions;
}

// ---- the inputs ----

struct Shape {
  std::size_t heads, d_c, d_r, length, capacity;
};

std::string describe(const Shape& s) {
  return "h = " + std::to_string(s.heads) + ", d_c = " + std::to_string(s.d_c) + ", d_r = " + std::to_string(s.d_r) +
         ", length " + std::to_string(s.length) + " of capacity " + std::to_string(s.capacity);
}

// DeepSeek's shapes scaled down (h = 16, d_c = 64, d_h^R = 16), lengths around the 128-position tile
// of the optimized versions (one position, part of a tile, a whole tile, one more); and the real
// widths (h = 128, d_c = 512, d_h^R = 64). Every cache has free slots past `length`.
const Shape kShapes[] = {
    {16, 64, 16, 1, 4},      {16, 64, 16, 7, 10},     {16, 64, 16, 128, 129},   {16, 64, 16, 129, 140},
    {16, 64, 16, 333, 340},  {128, 512, 64, 1, 3},    {128, 512, 64, 100, 128}, {128, 512, 64, 1000, 1024},
};

struct DecodeCase {
  Tensor2 q_absorbed, latents, rope_keys;
  std::size_t length;
  double scale;
};

// Latents and RoPE keys of N(0, 1) (the latents leave an RMSNorm), NaN in the free slots; queries of
// N(0, 1), and in every third head a query pulled towards one cached latent, so that its softmax
// has a peak (of about +6 in the scores) instead of being nearly flat. `logit_scale` multiplies the
// queries (100: scores in the hundreds, where a missing max subtraction overflows).
// MLA's scale 1/sqrt(d_h + d_h^R) with DeepSeek's d_c = 4 d_h.
DecodeCase make_case(const Shape& s, unsigned long long seed, double logit_scale = 1.0) {
  Rng rng(seed);
  DecodeCase c{rng.normal_matrix(s.heads, s.d_c + s.d_r), rng.normal_matrix(s.capacity, s.d_c),
               rng.normal_matrix(s.capacity, s.d_r), s.length,
               1.0 / std::sqrt(static_cast<double>(s.d_c / 4 + s.d_r))};
  for (std::size_t i = 0; i < s.heads; i += 3) {
    const std::size_t peak = (i * 7919) % s.length;
    const double pull = 6.0 / (c.scale * static_cast<double>(s.d_c));
    for (std::size_t e = 0; e < s.d_c; ++e) c.q_absorbed(i, e) += static_cast<float>(pull * c.latents(peak, e));
  }
  c.q_absorbed *= static_cast<float>(logit_scale);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::size_t j = s.length; j < s.capacity; ++j) {
    for (std::size_t e = 0; e < s.d_c; ++e) c.latents(j, e) = nan;
    for (std::size_t e = 0; e < s.d_r; ++e) c.rope_keys(j, e) = nan;
  }
  return c;
}

MlaDecodeAttention run(const Version& v, const DecodeCase& c) {
  return v.f(c.q_absorbed, c.latents, c.rope_keys, c.length, c.scale);
}

// ---- the double-precision oracle: multi-query attention with key k_j = [c^KV_j; k^R_j] and value
// c^KV_j, written from the formula ----

struct Oracle {
  DTensor2 out_latent;         // [h, d_c]
  DTensor1 lse;                // [h]
  double score_magnitude = 0;  // max over i, j of scale * sum |q^_ie k_je|
  double max_abs_value = 0;    // max |c^KV_j| over the cached positions
};

Oracle oracle(const DecodeCase& c) {
  const std::size_t h = c.q_absorbed.shape()[0], d_c = c.latents.shape()[1], d_r = c.rope_keys.shape()[1];
  Oracle o{DTensor2::from_shape({h, d_c}), DTensor1::from_shape({h})};
  o.out_latent.fill(0.0);
  std::vector<std::vector<double>> keys(c.length);  // k_j = [c^KV_j; k^R_j]
  for (std::size_t j = 0; j < c.length; ++j) {
    for (std::size_t e = 0; e < d_c; ++e) {
      keys[j].push_back(c.latents(j, e));
      o.max_abs_value = std::max(o.max_abs_value, std::fabs(static_cast<double>(c.latents(j, e))));
    }
    for (std::size_t e = 0; e < d_r; ++e) keys[j].push_back(c.rope_keys(j, e));
  }
  for (std::size_t i = 0; i < h; ++i) {
    std::vector<double> s(c.length);
    for (std::size_t j = 0; j < c.length; ++j) {
      double dot = 0.0, terms = 0.0;
      for (std::size_t e = 0; e < d_c + d_r; ++e) {
        dot += c.q_absorbed(i, e) * keys[j][e];
        terms += std::fabs(c.q_absorbed(i, e) * keys[j][e]);
      }
      s[j] = c.scale * dot;
      o.score_magnitude = std::max(o.score_magnitude, c.scale * terms);
    }
    // L_i = log sum_j e^{s_j}, through its maximum; then p_j = e^{s_j - L_i}
    const double m = *std::max_element(s.begin(), s.end());
    double l = 0.0;
    for (double sj : s) l += std::exp(sj - m);
    o.lse(i) = m + std::log(l);
    for (std::size_t j = 0; j < c.length; ++j)
      for (std::size_t e = 0; e < d_c; ++e) o.out_latent(i, e) += std::exp(s[j] - o.lse(i)) * keys[j][e];
  }
  return o;
}

// The float versions against the double oracle (chapter 00's rule for attention): a score of
// magnitude M (its sum of |terms|) computed in float is off by at most rtol M, with
// rtol = reduction_rtol(max(d_c + d_h^R, length)) = 10 eps sqrt(K); that moves a weighted sum of
// values by at most rtol max|c| (2M + 1) (attention_tolerance). The lse moves by at most the largest
// score error (it is 1-Lipschitz in the scores) plus rtol from the float sum of exponentials:
// atol rtol (M + 1), and FLT_EPSILON relative for its rounding to float.
struct DecodeTolerance {
  Tolerance out, lse;
};
DecodeTolerance tolerance(const Oracle& o, const Shape& s) {
  const double rtol = reduction_rtol(std::max(s.d_c + s.d_r, s.length));
  return {{attention_tolerance(s.d_c + s.d_r, s.length, o.score_magnitude, o.max_abs_value), rtol},
          {rtol * (o.score_magnitude + 1.0), FLT_EPSILON}};
}

class MlaDecodeVersions : public ::testing::TestWithParam<Version> {};

// Every version, on every shape and with logits in the hundreds, gives the oracle's weighted
// latents and lse; the NaN in the free slots past `length` would show in any element that read one.
TEST_P(MlaDecodeVersions, matches_the_double_oracle) {
  const Version& v = GetParam();
  for (const double logit_scale : {1.0, 100.0}) {
    for (const Shape& s : kShapes) {
      const unsigned long long seed = 5101 + s.length;
      const DecodeCase c = make_case(s, seed, logit_scale);
      const Oracle o = oracle(c);
      const DecodeTolerance tol = tolerance(o, s);
      const MlaDecodeAttention r = run(v, c);
      const std::string what = v.name + ", " + describe(s) + ", queries x " + std::to_string(logit_scale);
      EXPECT_TRUE(matches(r.out_latent, o.out_latent, tol.out,
                          {what + ": out_latent", {"head", "c"}, seed, "",
                           "a_i = sum_{j < length} softmax_j(scale (q~_i . c_j + q^R_i . k^R_j)) c_j; the usual "
                           "mistakes: the RoPE part of the score left out, a split's state rescaled with the wrong "
                           "maximum, positions past length read"}));
      EXPECT_TRUE(matches(r.lse, o.lse, tol.lse,
                          {what + ": lse", {"head"}, seed, "", "L_i = m_i + ln l_i = ln sum_j e^{s_ij}"}));
    }
  }
}

// The free slots are never read: a cache of capacity > length with NaN there gives exactly the
// bits of the same cache cut to `length` rows.
TEST_P(MlaDecodeVersions, free_slots_past_length_are_never_read) {
  const Version& v = GetParam();
  for (const Shape& s : {Shape{16, 64, 16, 100, 160}, Shape{128, 512, 64, 130, 200}}) {
    const DecodeCase c = make_case(s, 5201);
    DecodeCase cut = c;
    cut.latents = xt::view(c.latents, xt::range(0, s.length), xt::all());
    cut.rope_keys = xt::view(c.rope_keys, xt::range(0, s.length), xt::all());
    const MlaDecodeAttention with_free_slots = run(v, c), exact_size = run(v, cut);
    EXPECT_EQ(with_free_slots.out_latent, exact_size.out_latent) << v.name << ", " << describe(s);
    EXPECT_EQ(with_free_slots.lse, exact_size.lse) << v.name << ", " << describe(s);
  }
}

// The absorbed decode is multi-query attention: chapter 00's attention, given for every query head
// the one shared key [c^KV_j; k^R_j] and value c^KV_j (copied h times, what the absorbed cache never
// stores), gives each version's result. Both are within the oracle's tolerance of the exact
// answer, hence within twice that of each other.
TEST_P(MlaDecodeVersions, is_multi_query_attention_over_the_shared_latent_head) {
  const Version& v = GetParam();
  const Shape s{16, 64, 16, 100, 100};
  const unsigned long long seed = 5251;
  const DecodeCase c = make_case(s, seed);
  Tensor3 q = Tensor3::from_shape({s.heads, 1, s.d_c + s.d_r});
  Tensor3 k = Tensor3::from_shape({s.heads, s.length, s.d_c + s.d_r});
  Tensor3 values = Tensor3::from_shape({s.heads, s.length, s.d_c});
  for (std::size_t i = 0; i < s.heads; ++i) {
    for (std::size_t e = 0; e < s.d_c + s.d_r; ++e) q(i, 0, e) = c.q_absorbed(i, e);
    for (std::size_t j = 0; j < s.length; ++j) {
      for (std::size_t e = 0; e < s.d_c; ++e) k(i, j, e) = values(i, j, e) = c.latents(j, e);
      for (std::size_t e = 0; e < s.d_r; ++e) k(i, j, s.d_c + e) = c.rope_keys(j, e);
    }
  }
  AttentionConfig cfg;
  cfg.scale = c.scale;
  const Tensor3 attention = ref::scaled_dot_product_attention(q, k, values, cfg);
  const DTensor2 mqa = xt::cast<double>(xt::view(attention, xt::all(), 0, xt::all()));
  Tolerance tol = tolerance(oracle(c), s).out;
  tol.atol *= 2;
  EXPECT_TRUE(matches(run(v, c).out_latent, mqa, tol,
                      {v.name + " against chapter 00's attention with the shared head repeated, " + describe(s),
                       {"head", "c"}, seed, "", "every query head reads the same keys [c_j; k^R_j] and values c_j"}));
}

// Bad input: each an error naming the function and the parameter.
TEST_P(MlaDecodeVersions, bad_input_is_an_error_naming_the_parameter) {
  const Version& v = GetParam();
  const Shape s{4, 8, 4, 5, 6};
  const DecodeCase good = make_case(s, 5301);
  const std::string fn = "mla_absorbed_decode_attention";
  auto call = [&](const DecodeCase& c) { return [&v, c] { run(v, c); }; };
  auto with = [&](auto change) {
    DecodeCase c = good;
    change(c);
    return c;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // widths: q_absorbed must be d_c + d_h^R wide, rope_keys as long as latents
  EXPECT_TRUE(throws_error_naming(call(with([](DecodeCase& c) { c.q_absorbed = Tensor2::from_shape({4, 11}); })),
                                  {fn, "q_absorbed", "columns 11, expected 12", "d_c + d_h^R"}));
  EXPECT_TRUE(throws_error_naming(call(with([](DecodeCase& c) { c.latents = Tensor2::from_shape({6, 9}); })),
                                  {fn, "q_absorbed", "expected 13", "latents"}));
  EXPECT_TRUE(throws_error_naming(call(with([](DecodeCase& c) { c.rope_keys = Tensor2::from_shape({5, 4}); })),
                                  {fn, "rope_keys", "rows 5, expected 6", "capacity"}));
  EXPECT_TRUE(throws_error_naming(call(with([](DecodeCase& c) { c.q_absorbed = Tensor2::from_shape({0, 12}); })),
                                  {fn, "q_absorbed", "empty"}));
  // length in [1, capacity]
  EXPECT_TRUE(throws_error_naming(call(with([](DecodeCase& c) { c.length = 0; })), {fn, "length (0)", "capacity = 6"}));
  EXPECT_TRUE(throws_error_naming(call(with([](DecodeCase& c) { c.length = 7; })), {fn, "length (7)", "capacity = 6"}));
  // scale positive and finite
  for (const double scale : {0.0, -1.0, static_cast<double>(nan), 1e300})
    EXPECT_TRUE(throws_error_naming(call(with([scale](DecodeCase& c) { c.scale = scale; })), {fn, "scale"}));
  // NaN or infinity in the query or in a cached position
  EXPECT_TRUE(throws_error_naming(call(with([nan](DecodeCase& c) { c.q_absorbed(2, 3) = nan; })),
                                  {fn, "q_absorbed", "non-finite"}));
  EXPECT_TRUE(throws_error_naming(call(with([nan](DecodeCase& c) { c.latents(4, 1) = nan; })),
                                  {fn, "latents", "non-finite", "position 4"}));
  EXPECT_TRUE(throws_error_naming(call(with([inf](DecodeCase& c) { c.latents(0, 7) = -inf; })),
                                  {fn, "latents", "non-finite", "position 0"}));
  EXPECT_TRUE(throws_error_naming(call(with([inf](DecodeCase& c) { c.rope_keys(2, 0) = inf; })),
                                  {fn, "rope_keys", "non-finite", "position 2"}));
  // finite, but q . k beyond float's range
  EXPECT_TRUE(throws_error_naming(call(with([](DecodeCase& c) {
                                    c.q_absorbed *= 1e20f;
                                    for (std::size_t e = 0; e < 8; ++e) c.latents(3, e) = 1e20f;
                                  })),
                                  {fn, "too large"}));
}

INSTANTIATE_TEST_SUITE_P(Ch05MlaDecode, MlaDecodeVersions, ::testing::ValuesIn(all_versions()),
                         [](const ::testing::TestParamInfo<Version>& info) { return info.param.name; });

// Split-K: cutting the cached positions into ranges whose partial states (m, l, O~) are merged
// (chapter 04) gives the unsplit result up to rounding, for ranges of any length (one position
// each, ranges shorter and longer than a tile), even when one range holds a score far above all the
// others (a peak +80 above: the other ranges' weights e^{m_r - m} underflow to 0). Each result is
// within the oracle's tolerance of the exact one, so two of them are within twice that.
TEST(Ch05MlaDecode, splits_merged_equal_the_unsplit_result) {
  for (const Shape& s : {Shape{16, 64, 16, 333, 340}, Shape{128, 512, 64, 1000, 1000}}) {
    for (const bool far_peak : {false, true}) {
      const unsigned long long seed = 5401;
      DecodeCase c = make_case(s, seed);
      if (far_peak)  // head 1 sees position 17 at +80 above the rest
        for (std::size_t e = 0; e < s.d_c; ++e)
          c.q_absorbed(1, e) = static_cast<float>(80.0 / (c.scale * static_cast<double>(s.d_c)) * c.latents(17, e));
      const Oracle o = oracle(c);
      DecodeTolerance tol = tolerance(o, s);
      tol.out.atol *= 2;
      tol.lse.atol *= 2;
      const MlaDecodeAttention whole =
          opt::mla_absorbed_decode_attention_split_k(c.q_absorbed, c.latents, c.rope_keys, c.length, c.scale, 1);
      const DTensor2 whole_out = xt::cast<double>(whole.out_latent);
      const DTensor1 whole_lse = xt::cast<double>(whole.lse);
      for (const std::size_t splits : {2u, 3u, 7u, 16u, 333u, 5000u}) {
        const MlaDecodeAttention split =
            opt::mla_absorbed_decode_attention_split_k(c.q_absorbed, c.latents, c.rope_keys, c.length, c.scale, splits);
        const std::string what = std::to_string(splits) + " splits merged, " + describe(s) +
                                 (far_peak ? ", one score +80 above the rest" : "");
        EXPECT_TRUE(matches(split.out_latent, whole_out, tol.out,
                            {what, {"head", "c"}, seed, "",
                             "a = sum_r e^{m_r - m} O~_r / l with m = max_r m_r, l = sum_r e^{m_r - m} l_r"}));
        EXPECT_TRUE(matches(split.lse, whole_lse, tol.lse, {what + ": lse", {"head"}, seed, "", "L = m + ln l"}));
      }
    }
  }
  EXPECT_TRUE(throws_error_naming(
      [] {
        const DecodeCase c = make_case({4, 8, 4, 5, 6}, 5402);
        opt::mla_absorbed_decode_attention_split_k(c.q_absorbed, c.latents, c.rope_keys, c.length, c.scale, 0);
      },
      {"mla_absorbed_decode_attention", "splits (0)"}));
}

// ---- the core in its place: MLA's absorbed decode step, factored ----

// A small MLA layer with query compression (d = 32, n_h = 4, d_c' = 12, d_c = 16 = 4 d_h, d_h = 4,
// d_h^R = 4, d_v = 6 unlike d_h); its weights come from ch05_testing::random_mla_weights.
MlaConfig small_mla() {
  MlaConfig cfg;
  cfg.hidden_size = 32;
  cfg.num_heads = 4;
  cfg.q_lora_rank = 12;
  cfg.kv_lora_rank = 16;
  cfg.qk_nope_head_dim = 4;
  cfg.qk_rope_head_dim = 4;
  cfg.v_head_dim = 6;
  cfg.rope_theta = 100.0;
  return cfg;
}

// Prefill 5 tokens into an absorbed cache, then decode tokens 5 .. 9 one at a time. At every step,
// the absorbed queries q^_i = [W^UK_i^T q^C_i; q^R_i] of the new token (from `mla_project`), the
// attention core over the cache (which holds the new token too), then o_i = W^UV_i a_i and
// u = W^O [o_1; ...; o_h] give `mla_absorbed`'s output: the core is the same computation factored
// out (and `mla_absorbed` equals `mla_naive`, Ch05Mla.decoding_against_the_cache_equals_the_full_sequence).
//
// Tolerance: both sides compute the same double sums and round them to float at the same stages
// (q~, a, o, u), so they can differ by a float rounding (FLT_EPSILON relative) at each: a rounding
// of q~ moves a score by at most eps M (M its sum of |terms|) and a by 2 eps M max|c|; a rounding
// of a, o or u by eps times the sum of |terms| it rounds. So with A = max|a| + 2 M max|c|,
// O_ie = sum_c A |W^UV_c,ie| + |o_ie| and U_c = sum_ie O_ie |W^O_ie,c|: atol = 4 eps max_c U_c, rtol eps.
TEST(Ch05MlaDecode, the_core_up_projected_is_mla_absorbed_decode_step) {
  const MlaConfig cfg = small_mla();
  const unsigned long long seed = 5501;
  Rng rng(seed);
  const MlaWeights w = ch05_testing::random_mla_weights(cfg, rng);
  const std::size_t h = cfg.num_heads, d = cfg.hidden_size, d_c = cfg.kv_lora_rank;
  const std::size_t d_h = cfg.qk_nope_head_dim, d_r = cfg.qk_rope_head_dim, d_v = cfg.v_head_dim;
  const Tensor2 x = rng.normal_matrix(10, d);
  MlaCache cache(cfg, MlaPath::absorbed);
  ref::mla_absorbed(xt::view(x, xt::range(0, 5), xt::all()), w, cfg, cache);
  for (std::size_t t = 5; t < 10; ++t) {
    const Tensor2 token = xt::view(x, xt::range(t, t + 1), xt::all());
    const Tensor2 u = ref::mla_absorbed(token, w, cfg, cache);  // appends token t to the cache

    // q^_i = [W^UK_i^T q^C_i; q^R_i]: q~(i, c) = sum_e q^C(i, e) W^UK(c, i d_h + e)
    const ref::MlaProjections p = ref::mla_project(token, w, cfg, static_cast<long long>(t));
    Tensor2 q_absorbed = Tensor2::from_shape({h, d_c + d_r});
    for (std::size_t i = 0; i < h; ++i) {
      for (std::size_t c = 0; c < d_c; ++c) {
        double sum = 0.0;
        for (std::size_t e = 0; e < d_h; ++e) sum += static_cast<double>(p.q_nope(i, 0, e)) * w.w_uk(c, i * d_h + e);
        q_absorbed(i, c) = static_cast<float>(sum);
      }
      for (std::size_t e = 0; e < d_r; ++e) q_absorbed(i, d_c + e) = p.q_rope(i, 0, e);
    }
    const double scale = mla_softmax_scale(cfg);
    const MlaDecodeAttention core =
        ref::mla_absorbed_decode_attention(q_absorbed, cache.latents, cache.rope_keys, cache.tokens(), scale);

    // o_i = W^UV_i a_i (rounded to float, as mla_absorbed keeps it), u = W^O [o_1; ...; o_h] in double
    double score_magnitude = 0.0, max_latent = 0.0, max_a = 0.0;
    for (std::size_t j = 0; j < cache.tokens(); ++j) {
      for (std::size_t c = 0; c < d_c; ++c) max_latent = std::max(max_latent, std::fabs(double{cache.latents(j, c)}));
      for (std::size_t i = 0; i < h; ++i) {
        double terms = 0.0;
        for (std::size_t c = 0; c < d_c; ++c) terms += std::fabs(double{q_absorbed(i, c)} * cache.latents(j, c));
        for (std::size_t e = 0; e < d_r; ++e)
          terms += std::fabs(double{q_absorbed(i, d_c + e)} * cache.rope_keys(j, e));
        score_magnitude = std::max(score_magnitude, scale * terms);
      }
    }
    for (float a : core.out_latent) max_a = std::max(max_a, std::fabs(double{a}));
    const double a_bound = max_a + 2.0 * score_magnitude * max_latent;
    DTensor2 expected = xt::zeros<double>({std::size_t{1}, d});
    std::vector<double> u_terms(d, 0.0);
    for (std::size_t i = 0; i < h; ++i)
      for (std::size_t e = 0; e < d_v; ++e) {
        double sum = 0.0, o_terms = 0.0;
        for (std::size_t c = 0; c < d_c; ++c) {
          sum += static_cast<double>(core.out_latent(i, c)) * w.w_uv(c, i * d_v + e);
          o_terms += a_bound * std::fabs(double{w.w_uv(c, i * d_v + e)});
        }
        const auto o = static_cast<float>(sum);
        o_terms += std::fabs(double{o});
        for (std::size_t k = 0; k < d; ++k) {
          expected(0, k) += static_cast<double>(o) * w.w_o(i * d_v + e, k);
          u_terms[k] += o_terms * std::fabs(double{w.w_o(i * d_v + e, k)});
        }
      }
    const Tolerance tol{4.0 * FLT_EPSILON * *std::max_element(u_terms.begin(), u_terms.end()), FLT_EPSILON};
    EXPECT_TRUE(matches(u, expected, tol,
                        {"mla_absorbed against W^O W^UV mla_absorbed_decode_attention, token " + std::to_string(t) +
                             " after " + std::to_string(t) + " cached",
                         {"t", "c"},
                         seed,
                         "",
                         "the core takes the absorbed queries [W^UK_i^T q^C_i; q^R_i] and MLA's scale "
                         "1/sqrt(d_h + d_h^R), and attends over every cached position including the new one"}));
  }
}

}  // namespace
}  // namespace tvlab
