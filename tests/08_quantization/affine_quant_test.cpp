// Chapter 08, affine quantization (ref/affine_quant.hpp): every element within half a step of
// its value, codes inside their range, quantize(dequantize(q)) == q, per-channel scales against
// one scale for rows of very different size, the documents' min-max formula against the
// scale/zero-point form (the same codes after nudging, at most one apart before), the three
// roundings on ties, zero and constant groups, and every bad input named.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../common/testing.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/affine_quant.hpp"

namespace tvlab::ref {
namespace {

using tvlab::testing::throws_error_naming;

// Gaussian rows with 2% outliers (x 20), a zero run, a constant positive and a constant negative
// run of 32 elements (one group of 32, part of a channel or of the tensor otherwise).
Tensor2 hostile_matrix(std::uint64_t seed, std::size_t rows, std::size_t cols) {
  Rng rng(seed);
  Tensor2 x = rng.normal_matrix(rows, cols);
  for (auto& v : x)
    if (rng.uniform() < 0.02) v *= 20.0f;
  for (std::size_t c = 0; c < 32; ++c) x(0, c) = 0.0f, x(1, c) = 3.0f, x(2, c) = -0.75f;
  return x;
}

std::string describe(const AffineQuantConfig& cfg) {
  const char* g[] = {"per tensor", "per channel", "per group"};
  const char* r[] = {"nearest_even", "nearest_away", "stochastic"};
  return std::to_string(cfg.bits) + " bits, " + (cfg.symmetric ? "symmetric, " : "asymmetric, ") +
         g[static_cast<int>(cfg.granularity)] +
         (cfg.granularity == Granularity::per_group ? " " + std::to_string(cfg.group_size) : "") + ", " +
         r[static_cast<int>(cfg.rounding)];
}

std::vector<AffineQuantConfig> all_configs(Rounding rounding) {
  std::vector<AffineQuantConfig> out;
  for (int bits = 2; bits <= 8; ++bits)
    for (bool symmetric : {true, false})
      for (auto [granularity, group] : {std::pair{Granularity::per_tensor, std::size_t{0}},
                                        std::pair{Granularity::per_channel, std::size_t{0}},
                                        std::pair{Granularity::per_group, std::size_t{32}},
                                        std::pair{Granularity::per_group, std::size_t{16}}})
        out.push_back({.bits = bits,
                       .symmetric = symmetric,
                       .granularity = granularity,
                       .group_size = group,
                       .rounding = rounding,
                       .seed = 5});
  return out;
}

// |x - s (q - z)| <= s/2 for every element, computed in double from the stored float s. The
// slack: the codes are round(x / s) from the stored float s, exact up to double rounding (1e-12
// relative covers it). For asymmetric ranges the grid spans (2^b - 1) s_float while the range
// spans (2^b - 1) s_exact; the float rounding of s (relative 2^-24) moves the far end of the
// grid by at most (2^b - 1) 2^-24 s, which an element at that end may see as extra error.
TEST(AffineQuant, every_element_within_half_a_step_and_codes_in_range) {
  const Tensor2 x = hostile_matrix(811, 6, 96);
  for (Rounding rounding : {Rounding::nearest_even, Rounding::nearest_away, Rounding::stochastic}) {
    for (const AffineQuantConfig& cfg : all_configs(rounding)) {
      const AffineQuantized q = quantize_affine(x, cfg);
      const auto [qmin, qmax] = code_range(cfg.bits, cfg.symmetric);
      const std::size_t L = q.group_length;
      ASSERT_EQ(q.scales.size(), x.size() / L) << describe(cfg);
      // stochastic rounding may go to the farther neighbour: less than one step, not half
      const double step_fraction = rounding == Rounding::stochastic ? 1.0 : 0.5;
      std::size_t bad = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        const std::size_t g = i / L;
        const double s = q.scales[g];
        ASSERT_GE(q.codes[i], qmin) << describe(cfg) << ", element " << i;
        ASSERT_LE(q.codes[i], qmax) << describe(cfg) << ", element " << i;
        if (cfg.symmetric) {
          ASSERT_EQ(q.zero_points[g], 0);
        }
        const double err = std::fabs(x.data()[i] - s * (q.codes[i] - q.zero_points[g]));
        const double slack = s * (1e-12 + (cfg.symmetric ? 0.0 : std::ldexp(1.0, cfg.bits - 24)));
        if (!(err <= step_fraction * s + slack) && bad++ < 3)
          ADD_FAILURE() << describe(cfg) << ": element " << i << " (row " << i / x.shape()[1] << ", col "
                        << i % x.shape()[1] << ") x = " << x.data()[i] << ", code " << q.codes[i] << ", z "
                        << q.zero_points[g] << ", s " << s << ": error " << err << " > " << step_fraction
                        << " s\n  the usual cause: the zero point added before rounding, or the range not "
                           "covering the group";
      }
    }
  }
}

TEST(AffineQuant, dequantized_values_are_the_formula_and_finite) {
  const Tensor2 x = hostile_matrix(812, 4, 64);
  for (const AffineQuantConfig& cfg : all_configs(Rounding::nearest_even)) {
    const AffineQuantized q = quantize_affine(x, cfg);
    const Tensor2 back = dequantize_affine(q);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::size_t g = i / q.group_length;
      ASSERT_EQ(back.data()[i], static_cast<float>(static_cast<double>(q.scales[g]) * (q.codes[i] - q.zero_points[g])))
          << describe(cfg) << ", element " << i;
      ASSERT_TRUE(std::isfinite(back.data()[i]));
    }
  }
}

// quantize(dequantize(q)) gives the same codes and zero points: every x^ is s (q - z) with the
// group's extreme codes present (the min-max range puts the largest |x| on +-Q, or x_min and
// x_max on codes 0 and 2^b - 1 unless the range was widened to 0), so the range found again is
// the grid's own, up to the float rounding of x^ and s, far below half a step. Scales found
// again may differ from the first in the last bit of the float: s' = fl(fl(s Q) / Q).
TEST(AffineQuant, quantizing_the_dequantized_matrix_gives_the_same_codes) {
  const Tensor2 x = hostile_matrix(813, 5, 128);
  for (Rounding rounding : {Rounding::nearest_even, Rounding::nearest_away}) {
    for (const AffineQuantConfig& cfg : all_configs(rounding)) {
      const AffineQuantized q = quantize_affine(x, cfg);
      const AffineQuantized again = quantize_affine(dequantize_affine(q), cfg);
      ASSERT_EQ(again.codes, q.codes) << describe(cfg);
      ASSERT_EQ(again.zero_points, q.zero_points) << describe(cfg);
      for (std::size_t g = 0; g < q.scales.size(); ++g)
        ASSERT_LE(std::fabs(again.scales[g] - q.scales[g]), q.scales[g] * 0x1p-23) << describe(cfg) << ", group " << g;
    }
  }
}

// Rows whose sizes differ by 2^r: one scale for the matrix is set by the largest row, and at 4
// bits (7 steps each side) every row below max / 14 rounds to zero; one scale per row keeps each
// row's relative error near that of a Gaussian at 4 bits (about 0.1), whatever its size.
TEST(AffineQuant, per_channel_beats_per_tensor_on_rows_of_different_size) {
  Rng rng(814);
  Tensor2 x = rng.normal_matrix(8, 256);
  for (std::size_t r = 0; r < 8; ++r)
    for (std::size_t c = 0; c < 256; ++c) x(r, c) *= std::ldexp(1.0f, static_cast<int>(r) * 2);  // 4^r
  for (int bits : {8, 4}) {
    const auto relative_rmse = [&](Granularity g, std::size_t row) {
      const Tensor2 back = dequantize_affine(quantize_affine(x, {.bits = bits, .granularity = g}));
      double err = 0.0, ref = 0.0;
      for (std::size_t c = 0; c < 256; ++c) {
        err += std::pow(double(x(row, c)) - back(row, c), 2);
        ref += std::pow(double(x(row, c)), 2);
      }
      return std::sqrt(err / ref);
    };
    double total_tensor = 0.0, total_channel = 0.0;
    for (std::size_t r = 0; r < 8; ++r) {
      const double t = relative_rmse(Granularity::per_tensor, r), ch = relative_rmse(Granularity::per_channel, r);
      EXPECT_LE(ch, t + 1e-12) << bits << " bits, row " << r;
      total_tensor += t, total_channel += ch;
    }
    EXPECT_LT(total_channel, 0.25 * total_tensor) << bits << " bits";
    if (bits == 4) {
      EXPECT_EQ(relative_rmse(Granularity::per_tensor, 0), 1.0) << "the smallest row should round to zero";
      EXPECT_LT(relative_rmse(Granularity::per_channel, 0), 0.2);
    }
  }
}

// The documents' formula (000 L247) on the nudged range [-z s, (2^b - 1 - z) s] is
// round(x / s + z) = round(x / s) + z, the scale/zero-point form's code: z is an integer.
TEST(AffineQuant, min_max_formula_and_zero_point_form_agree_after_nudging) {
  Rng rng(815);
  for (int bits = 2; bits <= 8; ++bits)
    for (int trial = 0; trial < 20; ++trial) {
      const ClipRange raw{-rng.uniform(0.01, 3.0), rng.uniform(0.01, 5.0)};
      const ClipRange nudged = nudge_range(raw, bits);
      const AffineParams p = affine_params(raw, bits, false);
      EXPECT_NEAR(-nudged.lo / p.scale, p.zero_point, 1e-9);  // 0 is on the grid
      for (int i = 0; i < 200; ++i) {
        const double x = rng.uniform(nudged.lo, nudged.hi);
        const int doc = min_max_code(x, nudged.lo, nudged.hi, bits);
        const int zp = affine_code(x, p, bits, false, Rounding::nearest_even);
        ASSERT_EQ(doc, zp) << bits << " bits, range [" << raw.lo << ", " << raw.hi << "], x = " << x;
        ASSERT_NEAR(min_max_dequantize(doc, nudged.lo, nudged.hi, bits), double(p.scale) * (zp - p.zero_point), 1e-12);
      }
    }
}

// Without nudging they differ where the rounding of the offset -lo / s happens. Range [-0.4, 2.6]
// at 2 bits: s = 1, -lo / s = 0.4, z = round(0.4) = 0. The documents' form rounds x + 0.4 once,
// so lo and hi are codes but 0 comes back as -0.4; the zero-point form rounds x and 0.4 apart,
// so 0 comes back as 0 but the grid is {0, 1, 2, 3}, shifted by 0.4 from {-0.4, 0.6, 1.6, 2.6}.
TEST(AffineQuant, min_max_formula_and_zero_point_form_differ_by_the_rounding_of_z) {
  const ClipRange range{-0.4, 2.6};
  const AffineParams p = affine_params(range, 2, false);
  ASSERT_EQ(p.scale, 1.0f);
  ASSERT_EQ(p.zero_point, 0);
  struct Case {
    double x;
    int doc, zp;
  };
  // doc = round(x + 0.4), zp = round(x) (ties to even), both clamped to [0, 3]
  for (const Case& c : {Case{0.0, 0, 0}, Case{0.2, 1, 0}, Case{-0.4, 0, 0}, Case{2.6, 3, 3}, Case{1.0, 1, 1},
                        Case{1.2, 2, 1}, Case{0.5, 1, 0}}) {
    EXPECT_EQ(min_max_code(c.x, range.lo, range.hi, 2), c.doc) << "x = " << c.x;
    EXPECT_EQ(affine_code(c.x, p, 2, false, Rounding::nearest_even), c.zp) << "x = " << c.x;
  }
  EXPECT_NEAR(min_max_dequantize(min_max_code(0.0, range.lo, range.hi, 2), range.lo, range.hi, 2), -0.4, 1e-15);
  // On random ranges: codes at most one apart, both within s/2 of x on [lo, hi], and only the
  // zero-point form maps 0 to exactly 0.
  Rng rng(816);
  std::size_t differ = 0, doc_zero_exact = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int bits = 2 + trial % 7;
    const ClipRange r{-rng.uniform(0.01, 3.0), rng.uniform(0.01, 5.0)};
    const AffineParams q = affine_params(r, bits, false);
    const double s_doc = (r.hi - r.lo) / ((1 << bits) - 1);
    const double s = q.scale;
    for (int i = 0; i < 100; ++i) {
      const double x = rng.uniform(r.lo, r.hi);
      const int doc = min_max_code(x, r.lo, r.hi, bits), zp = affine_code(x, q, bits, false, Rounding::nearest_even);
      ASSERT_LE(std::abs(doc - zp), 1) << "x = " << x;
      differ += doc != zp;
      ASSERT_LE(std::fabs(x - min_max_dequantize(doc, r.lo, r.hi, bits)), s_doc / 2 * (1 + 1e-12));
      ASSERT_LE(std::fabs(x - s * (zp - q.zero_point)), s / 2 + s * std::ldexp(1.0, bits - 24));
    }
    EXPECT_EQ(s * (affine_code(0.0, q, bits, false, Rounding::nearest_even) - q.zero_point), 0.0);
    doc_zero_exact += min_max_dequantize(min_max_code(0.0, r.lo, r.hi, bits), r.lo, r.hi, bits) == 0.0;
  }
  EXPECT_GT(differ, 0u) << "random ranges should give some codes that differ";
  EXPECT_LT(doc_zero_exact, 20u) << "the documents' form should rarely represent 0 exactly";
}

// s = 1 (4 bits symmetric, max |x| = 7): x / s on the ties k + 1/2.
TEST(AffineQuant, roundings_on_ties) {
  Tensor2 x = {{7.0f, 2.5f, -0.5f, 3.5f, -2.5f, 0.5f, 1.5f, 6.5f}};
  const auto codes = [&](Rounding r) {
    return quantize_affine(x, {.bits = 4, .symmetric = true, .rounding = r}).codes;
  };
  EXPECT_EQ(codes(Rounding::nearest_even), (std::vector<int>{7, 2, 0, 4, -2, 0, 2, 6}));
  EXPECT_EQ(codes(Rounding::nearest_away), (std::vector<int>{7, 3, -1, 4, -3, 1, 2, 7}));
  EXPECT_EQ(round_with(-1.5, Rounding::nearest_even), -2.0);
  EXPECT_EQ(round_with(-2.5, Rounding::nearest_even), -2.0);
  EXPECT_EQ(round_with(2.3, Rounding::stochastic, 0.29), 3.0);
  EXPECT_EQ(round_with(2.3, Rounding::stochastic, 0.31), 2.0);
}

// Stochastic rounding is unbiased: the mean code of N copies of 0.3 s is 0.3, with standard
// deviation sqrt(0.3 * 0.7 / N) = 0.0015 for N = 100000; 5 deviations is the tolerance. The same
// seed gives the same codes, another seed others.
TEST(AffineQuant, stochastic_rounding_is_unbiased_and_seeded) {
  const std::size_t n = 100000;
  Tensor2 x = Tensor2::from_shape({1, n});
  x.fill(0.3f);
  x(0, 0) = 7.0f;  // s = 1 at 4 bits
  const AffineQuantConfig cfg{.bits = 4, .rounding = Rounding::stochastic, .seed = 17};
  const AffineQuantized q = quantize_affine(x, cfg);
  double mean = 0.0;
  for (std::size_t i = 1; i < n; ++i) mean += q.codes[i];
  mean /= double(n - 1);
  EXPECT_NEAR(mean, 0.3, 5 * std::sqrt(0.21 / n));
  EXPECT_EQ(quantize_affine(x, cfg).codes, q.codes);
  AffineQuantConfig other = cfg;
  other.seed = 18;
  EXPECT_NE(quantize_affine(x, other).codes, q.codes);
  EXPECT_EQ(quantize_affine(x, {.bits = 4}).codes[1], 0) << "nearest rounding always sends 0.3 to 0";
}

// An all-zero group has s = 0 and comes back as zeros; a constant group c becomes an end code
// and comes back as c up to the float rounding of s (relative 2^-24, then of x^: 2^-23 in all).
TEST(AffineQuant, zero_and_constant_groups_have_defined_answers) {
  Tensor2 x = Tensor2::from_shape({3, 32});
  for (std::size_t c = 0; c < 32; ++c) x(0, c) = 0.0f, x(1, c) = 3.0f, x(2, c) = -0.7f;
  for (int bits = 2; bits <= 8; ++bits)
    for (bool symmetric : {true, false}) {
      const AffineQuantConfig cfg{.bits = bits, .symmetric = symmetric, .granularity = Granularity::per_channel};
      const AffineQuantized q = quantize_affine(x, cfg);
      const auto [qmin, qmax] = code_range(bits, symmetric);
      EXPECT_EQ(q.scales[0], 0.0f);
      const Tensor2 back = dequantize_affine(q);
      for (std::size_t c = 0; c < 32; ++c) {
        EXPECT_EQ(back(0, c), 0.0f);
        EXPECT_EQ(q.codes[32 + c], qmax);
        EXPECT_EQ(q.codes[64 + c], symmetric ? qmin : 0);
        EXPECT_NEAR(back(1, c), 3.0f, 3.0 * 0x1p-23);
        EXPECT_NEAR(back(2, c), -0.7f, 0.7 * 0x1p-23);
      }
    }
  Tensor2 zeros = Tensor2::from_shape({2, 4});
  zeros.fill(0.0f);
  const Tensor2 back = dequantize_affine(quantize_affine(zeros, {.bits = 4, .symmetric = false}));
  for (float v : back) EXPECT_EQ(v, 0.0f);
}

// A clip narrower than the data sends the elements beyond it to the end codes.
TEST(AffineQuant, given_ranges_clamp_the_elements_outside) {
  Tensor2 x = {{-5.0f, -1.0f, 0.25f, 1.0f, 9.0f, 0.0f, 0.5f, -0.5f}};
  const AffineQuantized q = quantize_affine(x, {.bits = 3}, {ClipRange{-1.5, 1.5}});  // Q = 3, s = 0.5
  EXPECT_EQ(q.scales[0], 0.5f);
  EXPECT_EQ(q.codes, (std::vector<int>{-3, -2, 0, 2, 3, 0, 1, -1}));
  const AffineQuantized a = quantize_affine(x, {.bits = 2, .symmetric = false}, {ClipRange{-1.0, 2.0}});
  EXPECT_EQ(a.scales[0], 1.0f);  // (2 - -1) / 3
  EXPECT_EQ(a.zero_points[0], 1);
  EXPECT_EQ(a.codes, (std::vector<int>{0, 0, 1, 2, 3, 1, 1, 1}));  // round(x) + 1, clamped; 0.5, -0.5 tie to 0
}

TEST(AffineQuant, bad_input_is_named) {
  Tensor2 x = Rng(817).normal_matrix(2, 64);
  EXPECT_TRUE(throws_error_naming([&] { quantize_affine(x, {.bits = 1}); }, {"quantize_affine", "bits (1)"}));
  EXPECT_TRUE(throws_error_naming([&] { quantize_affine(x, {.bits = 9}); }, {"bits (9)"}));
  EXPECT_TRUE(throws_error_naming([&] { quantize_affine(x, {.granularity = Granularity::per_group}); },
                                  {"group_size"}));
  EXPECT_TRUE(throws_error_naming(
      [&] { quantize_affine(x, {.granularity = Granularity::per_group, .group_size = 24}); },
      {"group_size (24)", "divide", "64"}));
  EXPECT_TRUE(throws_error_naming([&] { quantize_affine(Tensor2::from_shape({0, 4}), {}); }, {"x", "empty"}));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    Tensor2 y = x;
    y(1, 5) = bad;
    EXPECT_TRUE(throws_error_naming([&] { quantize_affine(y, {}); }, {"x", "non-finite", "69"}));
    EXPECT_TRUE(throws_error_naming([&] { quantize_affine(y, {}, {ClipRange{-1.0, 1.0}}); }, {"x", "non-finite"}));
  }
  EXPECT_TRUE(throws_error_naming([&] { quantize_affine(x, {}, {}); }, {"ranges", "expected 1"}));
  EXPECT_TRUE(throws_error_naming([&] { quantize_affine(x, {}, {ClipRange{0.5, 2.0}}); }, {"range", "contain 0"}));
  EXPECT_TRUE(throws_error_naming([&] { quantize_affine(x, {}, {ClipRange{-INFINITY, 2.0}}); }, {"range", "finite"}));
  AffineQuantized q = quantize_affine(x, {.bits = 4});
  q.codes[3] = 8;
  EXPECT_TRUE(throws_error_naming([&] { dequantize_affine(q); }, {"dequantize_affine", "code 8", "[-7, 7]"}));
  q.codes.pop_back();
  EXPECT_TRUE(throws_error_naming([&] { dequantize_affine(q); }, {"codes"}));
  q = quantize_affine(x, {.bits = 4});
  q.scales.push_back(1.0f);
  EXPECT_TRUE(throws_error_naming([&] { dequantize_affine(q); }, {"scales"}));
  EXPECT_TRUE(throws_error_naming([&] { min_max_code(0.0, 1.0, -1.0, 4); }, {"min_max_code", "x_min"}));
  EXPECT_TRUE(throws_error_naming([&] { min_max_code(0.0, -1.0, 1.0, 0); }, {"bits (0)"}));
  EXPECT_TRUE(throws_error_naming([&] { code_range(10, true); }, {"bits (10)"}));
}

}  // namespace
}  // namespace tvlab::ref
