// Chapter 08, the OCP MX formats (tvlab/ref/microscaling.hpp) against the specification's
// definitions: every E2M1 code's value, the E8M0 scale, the shared exponent
// floor(log2 max|V_i|) - emax_elem of every block, each element code the nearest to V_i / X (found
// by search in double), the error of every element within its bound, exact round trips of blocks
// the format can hold, the all-zero block, bad input named; and the round-trip RMSE of the three
// formats on the data of the chapter's block-format table (printed).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "../common/testing.hpp"
#include "fp8_oracle.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/fp8.hpp"
#include "tvlab/ref/microscaling.hpp"

namespace tvlab::quant {
namespace {

using ref::MxBlockFormat;
using tvlab::testing::throws_error_naming;

const MxBlockFormat kFormats[] = {MxBlockFormat::mxfp8_e4m3, MxBlockFormat::mxfp8_e5m2, MxBlockFormat::mxfp4};

// E2M1 by its definition: sign bit 3, exponent field E (bits 2..1, bias 1), mantissa m (bit 0):
// (-1)^s 2^(E - 1) (1 + m/2) for E > 0, (-1)^s 2^0 (m/2) for E = 0.
double e2m1_definition(unsigned code) {
  const unsigned exponent = (code >> 1) & 3, mantissa = code & 1;
  const double magnitude = exponent == 0 ? mantissa / 2.0 : std::ldexp(1.0 + mantissa / 2.0, static_cast<int>(exponent) - 1);
  return (code & 8) ? -magnitude : magnitude;
}

// The element format's parameters, written out from the specifications: mantissa bits M, the
// exponent of the smallest normal emin, and the largest magnitude.
struct ElementSpec {
  int mantissa_bits, emin, emax;
  double max;
};
ElementSpec element_spec(MxBlockFormat f) {
  if (f == MxBlockFormat::mxfp8_e4m3) return {3, -6, 8, 448.0};
  if (f == MxBlockFormat::mxfp8_e5m2) return {2, -14, 15, 57344.0};
  return {1, 0, 2, 6.0};
}

// The code P of a scaled value v by the definition: the nearest element value (ties to the even
// code), clamped to +-max (FP8: fp8_oracle's search; E2M1: the same search over its 8 magnitudes).
unsigned element_by_search(double v, MxBlockFormat f) {
  if (f == MxBlockFormat::mxfp8_e4m3) return fp8_oracle::encode(v, fp8_oracle::kE4m3, true);
  if (f == MxBlockFormat::mxfp8_e5m2) return fp8_oracle::encode(v, fp8_oracle::kE5m2, true);
  unsigned best = 0;
  double best_distance = INFINITY;
  for (unsigned c = 0; c < 8; ++c) {
    const double d = std::fabs(std::fabs(v) - e2m1_definition(c));
    if (d < best_distance || (d == best_distance && c % 2 == 0)) best = c, best_distance = d;
  }
  return (std::signbit(v) ? 8u : 0u) | best;
}

Tensor1 row_of(const Tensor2& x, std::size_t r) { return xt::view(x, r, xt::all()); }

// N(0, 1) rows with 1% of the elements x 20, a zero block and a block of tiny values.
Tensor2 test_matrix(unsigned long long seed, std::size_t rows, std::size_t cols) {
  Rng rng(seed);
  Tensor2 x = rng.normal_matrix(rows, cols);
  for (float& v : x)
    if (rng.uniform() < 0.01) v *= 20.0f;
  for (std::size_t c = 0; c < 32; ++c) x(0, c) = 0.0f, x(1, c) *= 1e-30f;
  return x;
}

TEST(Ch08Microscaling, every_e2m1_code_has_its_value) {
  const double magnitudes[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  for (unsigned code = 0; code < 16; ++code) {
    const float got = ref::e2m1_decode(static_cast<std::uint8_t>(code));
    EXPECT_EQ(static_cast<double>(got), e2m1_definition(code)) << "code " << code;
    EXPECT_EQ(std::fabs(got), magnitudes[code & 7]) << "code " << code;
    EXPECT_EQ(std::signbit(got), code >= 8) << "code " << code;
    EXPECT_EQ(ref::e2m1_encode(got), code) << "code " << code << " back to itself";
    EXPECT_EQ(ref::mx_element_decode(static_cast<std::uint8_t>(code), MxBlockFormat::mxfp4), got);
  }
}

// Between neighbours the midpoint goes to the even code: 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2,
// 2.5 -> 2, 3.5 -> 4, 5 -> 4; beyond 6 (and inf) it saturates to 6.
TEST(Ch08Microscaling, e2m1_rounds_to_nearest_even_and_saturates) {
  for (unsigned code = 0; code < 7; ++code) {
    const double mid = (e2m1_definition(code) + e2m1_definition(code + 1)) / 2.0;
    const auto midf = static_cast<float>(mid);
    const unsigned even = code % 2 == 0 ? code : code + 1;
    EXPECT_EQ(ref::e2m1_encode(midf), even) << mid;
    EXPECT_EQ(ref::e2m1_encode(-midf), 8 | even) << -mid;
    EXPECT_EQ(ref::e2m1_encode(std::nextafter(midf, 0.0f)), code) << mid << " minus one ulp";
    EXPECT_EQ(ref::e2m1_encode(std::nextafter(midf, INFINITY)), code + 1) << mid << " plus one ulp";
  }
  for (float x : {6.0f, 7.0f, 8.0f, 1e30f, INFINITY}) {
    EXPECT_EQ(ref::e2m1_encode(x), 0x7) << x;
    EXPECT_EQ(ref::e2m1_encode(-x), 0xF) << -x;
  }
  EXPECT_EQ(ref::e2m1_encode(-0.0f), 0x8);
  EXPECT_TRUE(throws_error_naming([] { ref::e2m1_encode(NAN); }, {"e2m1_encode", "x (nan)"}));
  EXPECT_TRUE(throws_error_naming([] { ref::e2m1_decode(0x10); }, {"e2m1_decode", "code (16)"}));
}

TEST(Ch08Microscaling, e8m0_is_a_power_of_two_and_0xff_is_nan) {
  for (unsigned code = 0; code < 255; ++code)
    EXPECT_EQ(static_cast<double>(ref::e8m0_decode(static_cast<std::uint8_t>(code))), std::ldexp(1.0, static_cast<int>(code) - 127))
        << "code " << code;
  EXPECT_TRUE(std::isnan(ref::e8m0_decode(0xFF)));
  EXPECT_EQ(ref::mx_emax_elem(MxBlockFormat::mxfp8_e4m3), 8);
  EXPECT_EQ(ref::mx_emax_elem(MxBlockFormat::mxfp8_e5m2), 15);
  EXPECT_EQ(ref::mx_emax_elem(MxBlockFormat::mxfp4), 2);
  EXPECT_DOUBLE_EQ(ref::mx_bits_per_element(MxBlockFormat::mxfp8_e4m3), 8.25);
  EXPECT_DOUBLE_EQ(ref::mx_bits_per_element(MxBlockFormat::mxfp4), 4.25);
}

// Every block's scale is 127 + floor(log2 max|V_i|) - emax_elem (log2 in double: exact enough that
// floor is right even for a maximum one float ulp below a power of two), and its E8M0 value a power
// of two. Some blocks have their maximum exactly at, and one ulp below, a power of two.
TEST(Ch08Microscaling, the_shared_scale_is_the_definitions) {
  Tensor2 x = test_matrix(811, 6, 256);
  x(2, 5) = 64.0f, x(3, 40) = std::nextafter(64.0f, 0.0f), x(4, 70) = 3e38f;
  for (MxBlockFormat f : kFormats)
    for (std::size_t r = 2; r < x.shape()[0]; ++r) {
      const ref::MxRow q = ref::mx_quantize(row_of(x, r), f);
      for (std::size_t b = 0; b < q.scales.size(); ++b) {
        double amax = 0.0;
        for (std::size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x(r, 32 * b + i))));
        const double shared_exp = std::floor(std::log2(amax)) - ref::mx_emax_elem(f);
        EXPECT_EQ(q.scales[b], 127 + shared_exp) << ref::mx_name(f) << ", row " << r << ", block " << b << ", max|V| " << amax;
        int e = 0;
        EXPECT_EQ(std::frexp(ref::e8m0_decode(q.scales[b]), &e), 0.5f) << "a power of two";
      }
    }
}

// The bound. With X the block's scale and v = V / X (exact: X is a power of two), the element is the
// nearest value of the element format to v, or +-max when |v| > max. Hence, M mantissa bits and the
// smallest normal 2^emin:
// - |v| > max (only possible in the top binade [2^emax, 2^(emax+1))): |V - X P| = X (|v| - max), the
//   clamp, at most X (2^(emax+1) - max): 12.5% of |V| for E4M3 and E5M2, 25% for E2M1.
// - 2^emin <= |v| <= max: the grid spacing in v's binade [2^e, 2^(e+1)) is 2^(e-M), half of it is
//   2^(e-M-1) <= 2^(-M-1) |v|: |V - X P| <= 2^(-M-1) |V|, the relative half ulp (1/16 for E4M3, 1/8
//   for E5M2, 1/4 for E2M1).
// - |v| < 2^emin: the subnormal spacing 2^(emin-M), so |V - X P| <= X 2^(emin-M-1) (absolute).
// X P is a float (a few significant bits, within float's range here), so no further rounding.
TEST(Ch08Microscaling, each_element_is_the_nearest_code_and_its_error_within_the_bound) {
  const Tensor2 x = test_matrix(812, 8, 512);
  for (MxBlockFormat f : kFormats) {
    const ElementSpec spec = element_spec(f);
    double worst_relative = 0.0;
    for (std::size_t r = 0; r < x.shape()[0]; ++r) {
      const ref::MxRow q = ref::mx_quantize(row_of(x, r), f);
      const Tensor1 back = ref::mx_dequantize(q);
      for (std::size_t i = 0; i < x.shape()[1]; ++i) {
        const double scale = std::ldexp(1.0, static_cast<int>(q.scales[i / 32]) - 127);
        const double V = x(r, i), v = V / scale, a = std::fabs(v);
        ASSERT_EQ(q.elements[i], element_by_search(v, f))
            << ref::mx_name(f) << ", row " << r << ", element " << i << ": V / X = " << v;
        const double err = std::fabs(V - back(i));
        double bound = 0.0;
        if (a > spec.max) bound = scale * (a - spec.max);
        else if (a >= std::ldexp(1.0, spec.emin)) bound = std::ldexp(std::fabs(V), -spec.mantissa_bits - 1);
        else bound = scale * std::ldexp(1.0, spec.emin - spec.mantissa_bits - 1);
        ASSERT_LE(err, bound) << ref::mx_name(f) << ", row " << r << ", element " << i << ", V = " << V;
        if (a >= std::ldexp(1.0, spec.emin) && a <= spec.max) worst_relative = std::max(worst_relative, err / std::fabs(V));
      }
    }
    // the largest relative error is at a midpoint just above a power of two, |v| = 2^e (1 + 2^(-M-1)):
    // 2^(-M-1) / (1 + 2^(-M-1)) (0.0588 for E4M3, 0.111 for E5M2, 0.2 for E2M1); this many values
    // come close to it
    const double half_ulp = std::ldexp(1.0, -spec.mantissa_bits - 1), sup = half_ulp / (1.0 + half_ulp);
    EXPECT_LE(worst_relative, sup * (1.0 + 1e-12)) << ref::mx_name(f);
    EXPECT_GT(worst_relative, 0.9 * sup) << ref::mx_name(f);
  }
}

// V_i = 2^k P_i with element values P_i whose largest magnitude is the format's max: the shared
// exponent is k, V_i / X = P_i, so the codes are P_i's and the round trip is exact.
TEST(Ch08Microscaling, a_block_the_format_can_hold_round_trips_exactly) {
  Rng rng(813);
  for (MxBlockFormat f : kFormats)
    for (int k : {-100, -7, 0, 3, 60}) {
      Tensor1 x = Tensor1::from_shape({64});
      std::vector<std::uint8_t> codes(64);
      for (std::size_t i = 0; i < 64; ++i) {
        // random codes that are not NaN or inf, with the largest magnitude at element 7 and 40
        unsigned c = 0;
        do c = static_cast<unsigned>(rng.uniform(0, f == MxBlockFormat::mxfp4 ? 16 : 256));
        while (std::isnan(ref::mx_element_decode(static_cast<std::uint8_t>(c), f)) ||
               std::isinf(ref::mx_element_decode(static_cast<std::uint8_t>(c), f)) ||
               std::fabs(ref::mx_element_decode(static_cast<std::uint8_t>(c), f)) > ref::mx_element_max(f));
        if (i == 7 || i == 40) c = (f == MxBlockFormat::mxfp4 ? 0xF : f == MxBlockFormat::mxfp8_e4m3 ? 0xFE : 0x7B);
        codes[i] = static_cast<std::uint8_t>(c);
        x(i) = std::ldexp(ref::mx_element_decode(codes[i], f), k);
      }
      const ref::MxRow q = ref::mx_quantize(x, f);
      ASSERT_EQ(q.scales.size(), 2u);
      EXPECT_EQ(q.scales[0], 127 + k) << ref::mx_name(f) << ", k = " << k;
      EXPECT_EQ(q.scales[1], 127 + k) << ref::mx_name(f) << ", k = " << k;
      EXPECT_TRUE(q.elements == codes) << ref::mx_name(f) << ", k = " << k << ": the codes are the P_i";
      const Tensor1 back = ref::mx_dequantize(q);
      for (std::size_t i = 0; i < 64; ++i) ASSERT_EQ(back(i), x(i)) << ref::mx_name(f) << ", k = " << k << ", element " << i;
    }
}

TEST(Ch08Microscaling, an_all_zero_block_and_tiny_blocks_take_the_smallest_scale) {
  for (MxBlockFormat f : kFormats) {
    Tensor1 x = xt::zeros<float>({std::size_t{64}});
    for (std::size_t i = 32; i < 64; ++i) x(i) = std::numeric_limits<float>::denorm_min() * static_cast<float>(i);
    const ref::MxRow q = ref::mx_quantize(x, f);
    // zeros: log2(0) = -inf, clamped to -127; denormals: floor(log2) about -144, minus emax, clamped
    EXPECT_EQ(q.scales[0], 0) << ref::mx_name(f);
    EXPECT_EQ(q.scales[1], 0) << ref::mx_name(f);
    const Tensor1 back = ref::mx_dequantize(q);
    for (std::size_t i = 0; i < 32; ++i) {
      EXPECT_EQ(q.elements[i], 0) << ref::mx_name(f);
      EXPECT_EQ(back(i), 0.0f) << ref::mx_name(f);
    }
    // V / 2^-127 = i 2^-22: zero in E4M3 (below 2^-10, half its smallest subnormal) and E2M1; E5M2's
    // smallest subnormal 2^-16 takes i >= 32 + 1 (above 2^-17): each is the nearest code
    for (std::size_t i = 32; i < 64; ++i) {
      const double v = std::ldexp(static_cast<double>(x(i)), 127);
      EXPECT_EQ(q.elements[i], element_by_search(v, f)) << ref::mx_name(f) << ", element " << i;
      EXPECT_EQ(back(i), static_cast<float>(std::ldexp(ref::mx_element_decode(q.elements[i], f), -127)));
    }
    if (f != MxBlockFormat::mxfp8_e5m2) EXPECT_EQ(back(63), 0.0f) << ref::mx_name(f);
    else EXPECT_EQ(back(63), 0x1.0p-143f) << "63 x 2^-22 rounds to 2^-16, times 2^-127";
  }
  // the largest floats: shared_exp = 127 - emax_elem, well inside E8M0
  Tensor1 big = Tensor1::from_shape({32});
  big.fill(3e38f);
  const ref::MxRow q = ref::mx_quantize(big, MxBlockFormat::mxfp8_e4m3);
  EXPECT_EQ(q.scales[0], 127 + 127 - 8);
  EXPECT_NEAR(ref::mx_dequantize(q)(0), 3e38, 3e38 / 16);
}

TEST(Ch08Microscaling, bad_input_is_named) {
  for (MxBlockFormat f : kFormats) {
    EXPECT_TRUE(throws_error_naming([&] { ref::mx_quantize(Tensor1::from_shape({0}), f); }, {"mx_quantize", "x"}));
    EXPECT_TRUE(throws_error_naming([&] { ref::mx_quantize(xt::zeros<float>({std::size_t{48}}), f); },
                                    {"mx_quantize", "x's length (48)", "multiple of the block size 32"}));
    Tensor1 x = xt::zeros<float>({std::size_t{64}});
    x(37) = NAN;
    EXPECT_TRUE(throws_error_naming([&] { ref::mx_quantize(x, f); }, {"mx_quantize", "x", "non-finite", "index 37"}));
    x(37) = -INFINITY;
    EXPECT_TRUE(throws_error_naming([&] { ref::mx_quantize(x, f); }, {"mx_quantize", "x", "non-finite", "index 37"}));
    ref::MxRow q = ref::mx_quantize(xt::ones<float>({std::size_t{64}}), f);
    q.elements.pop_back();
    EXPECT_TRUE(throws_error_naming([&] { ref::mx_dequantize(q); }, {"mx_dequantize", "q.elements has 63 codes", "expected 64"}));
    q.elements.clear();
    EXPECT_TRUE(throws_error_naming([&] { ref::mx_dequantize(q); }, {"mx_dequantize", "q.elements is empty"}));
  }
  const auto bad = static_cast<MxBlockFormat>(3);
  EXPECT_TRUE(throws_error_naming([&] { ref::mx_quantize(xt::zeros<float>({std::size_t{32}}), bad); }, {"mx_quantize", "format (3)"}));
  ref::MxRow q = ref::mx_quantize(xt::ones<float>({std::size_t{32}}), MxBlockFormat::mxfp4);
  q.elements[3] = 0x1F;
  EXPECT_TRUE(throws_error_naming([&] { ref::mx_dequantize(q); }, {"mx_dequantize", "q.elements[3] (31)", "4-bit"}));
  // a NaN scale (E8M0 0xFF) makes its whole block NaN, the other blocks stay
  q = ref::mx_quantize(xt::ones<float>({std::size_t{64}}), MxBlockFormat::mxfp8_e4m3);
  q.scales[0] = 0xFF;
  const Tensor1 back = ref::mx_dequantize(q);
  EXPECT_TRUE(std::isnan(back(0)) && std::isnan(back(31)));
  EXPECT_EQ(back(32), 1.0f);
  EXPECT_TRUE(throws_error_naming([] { ref::mx_round_trip_rmse(Tensor2::from_shape({2, 40}), MxBlockFormat::mxfp4); },
                                  {"mx_quantize", "x's length (40)"}));
}

// The round-trip RMSE of 256 x 1024 N(0, 1) weights (Rng 808), and of the same weights with 1% of
// them x 20 (drawn from the same generator after the matrix, in element order): the numbers to
// compare with the block formats' table of chapters/08_quantization/results.md (Q8_0 5.38e-03,
// Q4_0 8.64e-02 on the Gaussian data). Printed; checked against the RMSE recomputed here from
// mx_quantize and mx_dequantize row by row, against the ordering the element formats' precision
// implies, and against the relative half-ulp bound: every element within 2^-(M+1) |x| but the
// clamped ones (at most a few per block, up to 12.5% for E4M3), so RMSE <= 2^-(M+1) rms(x) in practice.
TEST(Ch08Microscaling, round_trip_rmse_of_the_three_formats) {
  Rng rng(808);
  const Tensor2 gaussian = rng.normal_matrix(256, 1024);
  Tensor2 outliers = gaussian;
  for (float& v : outliers)
    if (rng.uniform() < 0.01) v *= 20.0f;
  double rmse[2][3];
  for (int d = 0; d < 2; ++d) {
    const Tensor2& x = d == 0 ? gaussian : outliers;
    double sum_x2 = 0.0;
    for (float v : x) sum_x2 += static_cast<double>(v) * v;
    const double rms = std::sqrt(sum_x2 / static_cast<double>(x.size()));
    for (int k = 0; k < 3; ++k) {
      rmse[d][k] = ref::mx_round_trip_rmse(x, kFormats[k]);
      double sum = 0.0;
      for (std::size_t r = 0; r < x.shape()[0]; ++r) {
        const Tensor1 back = ref::mx_dequantize(ref::mx_quantize(row_of(x, r), kFormats[k]));
        for (std::size_t c = 0; c < x.shape()[1]; ++c) sum += std::pow(static_cast<double>(x(r, c)) - back(c), 2);
      }
      EXPECT_NEAR(rmse[d][k], std::sqrt(sum / static_cast<double>(x.size())), 1e-12 * rmse[d][k]);
      EXPECT_LE(rmse[d][k], std::ldexp(rms, -element_spec(kFormats[k]).mantissa_bits - 1)) << ref::mx_name(kFormats[k]);
      std::cout << "  " << (d == 0 ? "N(0,1)          " : "1% outliers x 20") << "  " << std::left << std::setw(10)
                << ref::mx_name(kFormats[k]) << std::right << "  RMSE " << std::scientific << std::setprecision(2)
                << rmse[d][k] << std::defaultfloat << "  (rms of x " << std::setprecision(4) << rms << ")\n";
      ::testing::Test::RecordProperty(std::string(d == 0 ? "gaussian_" : "outliers_") + ref::mx_name(kFormats[k]),
                                      std::to_string(rmse[d][k]));
    }
    // 3 mantissa bits beat 2, which beat 1
    EXPECT_LT(rmse[d][0], rmse[d][1]);
    EXPECT_LT(rmse[d][1], rmse[d][2]);
  }
}

}  // namespace
}  // namespace tvlab::quant
