// Chapter 02: RoPE frequencies and their context-extension variants, computed independently from
// the papers' definitions; the NTK-aware base of the document.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "../common/testing.hpp"
#include "tvlab/analysis/rope_extrapolation.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/opt/rope.hpp"
#include "tvlab/ref/alibi.hpp"
#include "tvlab/opt/learned_positions.hpp"
#include "tvlab/ref/learned_positions.hpp"
#include "tvlab/ref/rope.hpp"
#include "tvlab/ref/sinusoidal.hpp"

namespace tvlab::ref {
namespace {

using tvlab::testing::throws_error_naming;


TEST(Ch02Frequencies, ntk_aware_base_for_d_128_alpha_4) {
  // beta' = beta * alpha^(d / (d - 2)) = 10000 * 4^(128/126).
  EXPECT_NEAR(ntk_aware_base(10000, 4, 128), 10000 * std::exp(128.0 / 126.0 * std::log(4.0)), 1e-9);
  EXPECT_GT(ntk_aware_base(10000, 4, 128), 40000.0);  // slightly more than alpha * beta
  // The lowest frequency is then divided by exactly alpha: theta_{d/2-1}' = theta_{d/2-1} / alpha.
  const double d = 128, i = 63;
  EXPECT_NEAR(std::pow(ntk_aware_base(10000, 4, 128), -2 * i / d), std::pow(10000.0, -2 * i / d) / 4, 1e-18);
  EXPECT_TRUE(throws_error_naming([] { ntk_aware_base(10000, 0.5, 128); }, {"ntk_aware_base", "alpha"}));
  EXPECT_TRUE(throws_error_naming([] { ntk_aware_base(1, 4, 128); }, {"ntk_aware_base", "base"}));
  EXPECT_TRUE(throws_error_naming([] { ntk_aware_base(10000, 4, 2); }, {"ntk_aware_base", "head_dim"}));
}

TEST(Ch02Frequencies, deepseek_moves_the_temperature_into_the_softmax_scale) {
  // DeepSeek-V3: factor 40, mscale = mscale_all_dim = 1 -> cos/sin unscaled, softmax scale times
  // (0.1 ln 40 + 1)^2; DeepSeek-V2: mscale_all_dim 0.707 -> (0.0707 ln 40 + 1)^2.
  RopeScaling v3;
  v3.rope_type = "yarn";
  v3.factor = 40;
  v3.mscale = 1.0;
  v3.mscale_all_dim = 1.0;
  const double m3 = 0.1 * std::log(40.0) + 1;
  EXPECT_NEAR(ref::deepseek_softmax_scale_factor(v3), m3 * m3, 1e-14);
  EXPECT_NEAR(ref::deepseek_softmax_scale_factor(v3), 1.8738542, 5e-8);
  RopeScaling v2 = v3;
  v2.mscale = 0.707;
  v2.mscale_all_dim = 0.707;
  const double m2 = 0.1 * 0.707 * std::log(40.0) + 1;
  EXPECT_NEAR(ref::deepseek_softmax_scale_factor(v2), m2 * m2, 1e-14);
  // Without mscale_all_dim (plain YaRN), with it 0, or with rope_type default, the softmax scale is
  // untouched (Hugging Face's yarn_apply_mscale).
  RopeScaling plain = v3;
  plain.mscale_all_dim.reset();
  EXPECT_EQ(ref::deepseek_softmax_scale_factor(plain), 1.0);
  plain.mscale_all_dim = 0.0;
  EXPECT_EQ(ref::deepseek_softmax_scale_factor(plain), 1.0);
  plain = v3;
  plain.rope_type = "default";
  EXPECT_EQ(ref::deepseek_softmax_scale_factor(plain), 1.0);
  v3.mscale_all_dim = -1.0;
  EXPECT_TRUE(tvlab::testing::throws_error_naming([&] { ref::deepseek_softmax_scale_factor(v3); },
                                                  {"deepseek_softmax_scale_factor", "mscale_all_dim"}));
}

TEST(Ch02Alibi, slopes_for_8_12_and_16_heads) {
  // n a power of two: m_h = 2^(-8 (h + 1) / n).
  const DTensor1 s8 = alibi_slopes(8), s16 = alibi_slopes(16), s12 = alibi_slopes(12);
  for (int h = 0; h < 8; ++h) EXPECT_NEAR(s8(h), std::pow(2.0, -(h + 1)), 1e-15);
  for (int h = 0; h < 16; ++h) EXPECT_NEAR(s16(h), std::pow(2.0, -(h + 1) / 2.0), 1e-15);
  // 12 heads: the 8-head slopes, then the odd powers 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 of the 16-head
  // series (its entries 0, 2, 4, 6) — not in decreasing order, as in the authors' code.
  ASSERT_EQ(s12.size(), 12u);
  for (int h = 0; h < 8; ++h) EXPECT_NEAR(s12(h), std::pow(2.0, -(h + 1)), 1e-15);
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(s12(8 + k), std::pow(2.0, -(2 * k + 1) / 2.0), 1e-15);
  EXPECT_EQ(alibi_slopes(1).size(), 1u);
  EXPECT_NEAR(alibi_slopes(1)(0), std::pow(2.0, -8.0), 1e-15);
}

TEST(Ch02Sinusoidal, values_and_the_relative_distance_property) {
  const Tensor2 pe = sinusoidal_position_encoding(50, 16);
  // Row p: (sin(p w_0), cos(p w_0), sin(p w_1), ...), w_i = 10000^(-2i/16).
  for (int p : {0, 1, 7, 49})
    for (int i = 0; i < 8; ++i) {
      const double w = std::pow(10000.0, -2.0 * i / 16);
      EXPECT_NEAR(pe(p, 2 * i), std::sin(p * w), 1e-7);
      EXPECT_NEAR(pe(p, 2 * i + 1), std::cos(p * w), 1e-7);
    }
  // PE(p) . PE(p + k) = sum_i cos(k w_i): the same for every p.
  for (int k : {1, 5, 20}) {
    double expected = 0;
    for (int i = 0; i < 8; ++i) expected += std::cos(k * std::pow(10000.0, -2.0 * i / 16));
    for (int p : {0, 3, 29}) {
      double dot = 0;
      for (int j = 0; j < 16; ++j) dot += static_cast<double>(pe(p, j)) * pe(p + k, j);
      EXPECT_NEAR(dot, expected, 1e-5) << "p = " << p << ", k = " << k;
    }
  }
  // An offset shifts the rows: encoding positions 10.. equals rows 10.. of the full table.
  const Tensor2 shifted = sinusoidal_position_encoding(5, 16, 10000.0, 10);
  for (int t = 0; t < 5; ++t)
    for (int j = 0; j < 16; ++j) EXPECT_EQ(shifted(t, j), pe(10 + t, j));
  EXPECT_TRUE(throws_error_naming([] { sinusoidal_position_encoding(4, 7); }, {"d_model", "even"}));
  EXPECT_TRUE(throws_error_naming([] { sinusoidal_position_encoding(0, 8); }, {"seq"}));
  EXPECT_TRUE(throws_error_naming([] { sinusoidal_position_encoding(4, 8, 1.0); }, {"base"}));
  EXPECT_TRUE(throws_error_naming([] { sinusoidal_position_encoding(4, 8, 10000.0, -1); }, {"first_position"}));
}

}  // namespace
}  // namespace tvlab::ref

// ------------------------------------------------------------------- learned absolute positions

namespace tvlab::ch02 {
namespace {

using tvlab::testing::throws_error_naming;

TEST(Ch02LearnedPositions, lookup_returns_rows_and_fails_beyond_the_table) {
  Tensor2 table = Tensor2::from_shape({8, 4});
  for (std::size_t p = 0; p < 8; ++p)
    for (std::size_t c = 0; c < 4; ++c) table(p, c) = static_cast<float>(10 * p + c);
  const Tensor2 rows = ref::learned_position_embedding(table, 5, 3);
  for (std::size_t t = 0; t < 3; ++t)
    for (std::size_t c = 0; c < 4; ++c) EXPECT_EQ(rows(t, c), table(5 + t, c));
  EXPECT_EQ(opt::learned_position_embedding(table, 5, 3), rows);  // the same function under opt
  // Position 8 does not exist: the error names the position and the table size.
  EXPECT_TRUE(throws_error_naming([&] { ref::learned_position_embedding(table, 6, 3); },
                                  {"learned_position_embedding", "position 8", "max_positions = 8"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::learned_position_embedding(table, -1, 3); }, {"first_position"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::learned_position_embedding(table, 0, 0); }, {"count"}));
}

// ------------------------------------------------------------------------ extrapolation experiment

TEST(Ch02Extrapolation, each_method_moves_the_frequencies_the_lesson_says) {
  const int d = 128;
  const double base = 10000, s = 4;
  const long long L = 4096;
  const auto rows = analysis::rope_extrapolation(d, base, L, s, 8, 3);
  ASSERT_EQ(rows.size(), 5U);
  // Pairs that never complete a turn in L positions: (L - 1) b^(-2i/d) < 2 pi, counted here.
  int slow_pairs = 0;
  for (int i = 0; i < d / 2; ++i) slow_pairs += (L - 1) * std::pow(base, -2.0 * i / d) < 2 * std::numbers::pi ? 1 : 0;
  const auto& none = rows[0];
  const auto& pi = rows[1];
  const auto& ntk = rows[2];
  const auto& yarn = rows[4];
  EXPECT_EQ(none.unseen_angle_pairs, slow_pairs);
  EXPECT_EQ(none.short_range_change, 0.0);
  EXPECT_EQ(none.neighbour_resolution, 1.0);
  // PI: every angle stays inside the trained range, at the price of s times less resolution.
  EXPECT_EQ(pi.unseen_angle_pairs, 0);
  EXPECT_NEAR(pi.neighbour_resolution, 1 / s, 1e-15);
  // NTK-aware and YaRN keep the fastest pair (theta_0 = 1) exactly.
  EXPECT_EQ(ntk.neighbour_resolution, 1.0);
  EXPECT_EQ(yarn.neighbour_resolution, 1.0);
  // YaRN interpolates every slow pair fully (they lie below beta_slow = 1 turn in L).
  EXPECT_EQ(yarn.unseen_angle_pairs, 0);
  // Scores beyond L leave the trained range far more often without any method.
  EXPECT_GT(none.outside_range, 4 * yarn.outside_range);
  EXPECT_GT(none.outside_range, 4 * pi.outside_range);
  EXPECT_GT(none.self_below_minimum, 4 * pi.self_below_minimum);
  // PI changes short-range scores the most; YaRN, which keeps the fast pairs, less.
  EXPECT_GT(pi.short_range_change, 2 * yarn.short_range_change);
  EXPECT_TRUE(throws_error_naming([] { analysis::rope_extrapolation(127, 1e4, 4096, 4, 8, 3); }, {"head_dim"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::rope_extrapolation(64, 1e4, 32, 4, 8, 3); }, {"original_length"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::rope_extrapolation(64, 1e4, 4096, 0.5, 8, 3); }, {"factor"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::rope_extrapolation(64, 1e4, 4096, 4, 0, 3); }, {"samples"}));
}

}  // namespace
}  // namespace tvlab::ch02

// ------------------------------------------------------------------------ opt's in-place RoPE

namespace tvlab::ch02 {
namespace {

TEST(Ch02OptRope, in_place_with_a_cache_matches_the_reference_and_checks_x_in_the_same_pass) {
  RopeConfig cfg;
  cfg.head_dim = 16;
  const RopeFrequencies f = ref::rope_frequencies(cfg);
  Rng rng(4);
  const Tensor3 x = rng.normal_tensor(3, 10, 16);
  const opt::RopeCache cache = opt::make_rope_cache(f, 5, 20);  // positions 5 .. 24
  Tensor3 y = x;
  opt::apply_rope_inplace(y, cache, RopeLayout::interleaved, 9);  // rows at 9 .. 18
  EXPECT_TRUE(tvlab::testing::matches(y, xt::eval(xt::cast<double>(ref::apply_rope(x, f, RopeLayout::interleaved, 9))),
                                      {1e-6, 1e-6}, {"apply_rope_inplace vs ref::apply_rope", {"h", "t", "d"}, 4, "", ""}));
  Tensor3 bad = x;
  bad(2, 7, 3) = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(tvlab::testing::throws_error_naming([&] { opt::apply_rope_inplace(bad, cache, RopeLayout::half_split, 5); },
                                                  {"apply_rope", "x", "inf or NaN"}));
  // Finite input whose rotation overflows float: x near FLT_MAX with a_f = 2.
  RopeFrequencies big = f;
  big.attention_factor = 2.0;
  const opt::RopeCache big_cache = opt::make_rope_cache(big, 5, 20);
  Tensor3 huge = xt::full_like(x, 3e38f);
  EXPECT_TRUE(tvlab::testing::throws_error_naming([&] { opt::apply_rope_inplace(huge, big_cache, RopeLayout::half_split, 5); },
                                                  {"apply_rope", "x", "overflows"}));
  big.attention_factor = 1e300;
  EXPECT_TRUE(tvlab::testing::throws_error_naming([&] { opt::make_rope_cache(big, 0, 4); },
                                                  {"make_rope_cache", "attention_factor"}));
  EXPECT_TRUE(tvlab::testing::throws_error_naming([&] { opt::apply_rope_inplace(y, cache, RopeLayout::half_split, 17); },
                                                  {"apply_rope", "positions [17, 27)", "cache [5, 25)"}));
}

}  // namespace
}  // namespace tvlab::ch02
