// Chapter 08, the quantized matrix-vector product over every backend of the registry (the CUDA
// cases skip without a device, except the checks made before any device call): the same bits
// as the reference (integer dots inside blocks, the float terms and their sum in one order), a tight
// check against the double-precision dot of the dequantized operands, a loose one against the
// original floats with the quantization error bounded from the operands, and bad input.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <limits>
#include <vector>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "tvlab/core/dtype.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/block_quant.hpp"
#include "tvlab/ref/quantized_gemv.hpp"

namespace tvlab::quant {
namespace {

using tvlab::testing::throws_error_naming;

struct Problem {
  Tensor2 w_float;
  QuantizedMatrix w;
  Tensor1 x;
};

// W [rows, cols] ~ N(0, 1) with 1% outliers x 10, x ~ N(0, 1).
Problem problem(unsigned long long seed, std::size_t rows, std::size_t cols, GgmlType type) {
  Rng rng(seed);
  Problem p;
  p.w_float = rng.normal_matrix(rows, cols);
  for (auto& v : p.w_float)
    if (rng.uniform() < 0.01) v *= 10.0f;
  p.w = ref::quantize(p.w_float, type);
  const Tensor2 x = rng.normal_matrix(1, cols);
  p.x = Tensor1::from_shape({cols});
  std::copy(x.begin(), x.end(), p.x.begin());
  return p;
}

// The unit of the product's float terms: a block of 32, or Q4_K's super-block of 256.
std::size_t term_length(GgmlType type) { return block_size(type); }

// What the integer codes of x stand for, in double: d q of its Q8_0 blocks (Q8_0 and Q4_0 weights)
// or of its Q8_K super-blocks (Q4_K weights; float d, int8 codes, decoded here from the bytes).
std::vector<double> exact_activations(const Tensor1& x, GgmlType type) {
  std::vector<double> out(x.size());
  if (type == GgmlType::q4_K) {
    const std::vector<std::uint8_t> blocks = ref::quantize_activations_q8_k(x);
    for (std::size_t b = 0; b < x.size() / 256; ++b) {
      const std::uint8_t* block = blocks.data() + b * ref::kQ8KBlockBytes;
      std::uint32_t bits = 0;
      for (int i = 0; i < 4; ++i) bits |= static_cast<std::uint32_t>(block[i]) << (8 * i);
      float d = 0.0f;
      std::memcpy(&d, &bits, 4);
      for (std::size_t l = 0; l < 256; ++l) out[b * 256 + l] = static_cast<double>(d) * static_cast<std::int8_t>(block[4 + l]);
    }
    return out;
  }
  const std::vector<std::uint8_t> blocks = ref::quantize_activations_q8_0(x);
  for (std::size_t b = 0; b < x.size() / 32; ++b)
    for (std::size_t j = 0; j < 32; ++j)
      out[b * 32 + j] = static_cast<double>(read_fp16(blocks.data() + b * 34)) * static_cast<std::int8_t>(blocks[b * 34 + 2 + j]);
  return out;
}

// Weight j of row r as the two parts its codes stand for, in double: (d q, 0) for Q8_0 and Q4_0,
// (d s q, dmin m) for Q4_K, whose value is the first minus the second.
std::pair<double, double> exact_weight_parts(const QuantizedMatrix& w, std::size_t r, std::size_t j) {
  const std::uint8_t* block = w.row(r) + j / block_size(w.type) * block_bytes(w.type);
  const std::size_t l = j % block_size(w.type);
  if (w.type != GgmlType::q4_K) return {static_cast<double>(read_fp16(block)) * ref::block_code(w.type, block, l), 0.0};
  int s = 0, m = 0;
  ref::q4_k_scale_min(l / 32, block + 4, s, m);
  const std::uint8_t nibbles = block[16 + 32 * (l / 64) + l % 32];
  const int q = (l / 32) % 2 == 0 ? nibbles & 0x0F : nibbles >> 4;
  return {static_cast<double>(read_fp16(block)) * s * q, static_cast<double>(read_fp16(block + 2)) * m};
}

class QuantizedGemv : public ::testing::TestWithParam<std::tuple<Backend, GgmlType>> {};

// 37 rows (not a multiple of the four rows the optimized kernel runs together) and 13 blocks per
// row (not a multiple of its eight), then a wide one.
TEST_P(QuantizedGemv, bits_match_the_reference) {
  const auto& [backend, type] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  for (const auto& [rows, blocks] : {std::pair<std::size_t, std::size_t>{37, 13}, {9, 160}}) {
    const std::size_t cols = blocks * term_length(type);
    const Problem p = problem(811 + rows, rows, cols, type);
    const Tensor1 got = backend.quantized_gemv(p.w, p.x), expected = ref::quantized_gemv(p.w, p.x);
    ASSERT_EQ(got.size(), rows);
    for (std::size_t r = 0; r < rows; ++r)
      ASSERT_EQ(got(r), expected(r)) << backend.name << ", " << type_name(type) << ", " << rows << " x " << cols
                                     << ": row " << r << " (the integer dots are exact, so a difference is the order "
                                        "or rounding of the float terms and their sum)";
  }
}

// Against sum_j w^_rj x^_j in double, the same numbers as the codes. Q8_0 and Q4_0: each block's
// float term is rounded twice (the product of the scales or of sumi and d_w, then the second
// product), at most 2u of the term (u = 2^-24), and the B - 1 additions in order add at most
// (B - 1) u of the sum of |terms|: |y - exact| <= (B + 1) u sum_b |term_b|. Q4_K: two terms per
// super-block, (d d_x) S and (dmin d_x) M, each rounded at most three times (d d_x, S as a float, the
// product), and 2B - 1 additions: |y - exact| <= (2B + 2) u sum_b (|plus_b| + |minus_b|), 2B + 3
// here to cover the second-order terms.
TEST_P(QuantizedGemv, equals_the_dot_of_the_dequantized_operands_to_float_rounding) {
  const auto& [backend, type] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const std::size_t rows = 23, length = term_length(type), blocks = type == GgmlType::q4_K ? 12 : 64, cols = blocks * length;
  const Problem p = problem(812, rows, cols, type);
  const std::vector<double> x_hat = exact_activations(p.x, type);
  const Tensor1 y = backend.quantized_gemv(p.w, p.x);
  const double u = std::ldexp(1.0, -24);
  const double roundings = type == GgmlType::q4_K ? 2.0 * blocks + 3.0 : blocks + 1.0;
  for (std::size_t r = 0; r < rows; ++r) {
    double exact = 0.0, sum_abs_terms = 0.0;
    for (std::size_t b = 0; b < blocks; ++b) {
      double plus = 0.0, minus = 0.0;
      for (std::size_t j = b * length; j < (b + 1) * length; ++j) {
        const auto [scaled, offset] = exact_weight_parts(p.w, r, j);
        plus += scaled * x_hat[j];
        minus += offset * x_hat[j];
      }
      exact += plus - minus;
      sum_abs_terms += std::fabs(plus) + std::fabs(minus);
    }
    const double bound = roundings * u * sum_abs_terms;
    EXPECT_LE(std::fabs(y(r) - exact), bound)
        << backend.name << ", " << type_name(type) << ": row " << r << " gives " << y(r) << ", the dequantized "
        << "operands' dot is " << exact << "; a kernel that drops a block, misreads a nibble or a 6-bit scale, or "
        << "forgets Q4_0's offset of 8 or Q4_K's minimum lands far outside this float-rounding bound";
  }
}

// Against W x of the original floats: |W x - W^ x^| <= sum_j |w - w^| |x| + |w^| |x - x^| (the
// triangle inequality, computed here in double from the operands), plus the float bound above.
TEST_P(QuantizedGemv, stays_within_the_quantization_error_of_both_operands) {
  const auto& [backend, type] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const std::size_t rows = 11, length = term_length(type), blocks = type == GgmlType::q4_K ? 4 : 32, cols = blocks * length;
  const Problem p = problem(813, rows, cols, type);
  const std::vector<double> x_hat = exact_activations(p.x, type);
  const Tensor1 y = backend.quantized_gemv(p.w, p.x);
  const double roundings = type == GgmlType::q4_K ? 2.0 * blocks + 3.0 : blocks + 1.0;
  for (std::size_t r = 0; r < rows; ++r) {
    double exact = 0.0, bound = 0.0, magnitude = 0.0;
    for (std::size_t j = 0; j < cols; ++j) {
      const auto [scaled, offset] = exact_weight_parts(p.w, r, j);
      const double w = p.w_float(r, j), x = p.x(j), w_hat = scaled - offset;
      exact += w * x;
      bound += std::fabs(w - w_hat) * std::fabs(x) + std::fabs(w_hat) * std::fabs(x - x_hat[j]);
      magnitude += (std::fabs(scaled) + std::fabs(offset)) * std::fabs(x_hat[j]);
    }
    bound += roundings * std::ldexp(1.0, -24) * magnitude;
    EXPECT_LE(std::fabs(y(r) - exact), bound) << backend.name << ", " << type_name(type) << ": row " << r;
  }
}

TEST_P(QuantizedGemv, bad_input_is_named) {
  const auto& [backend, type] = GetParam();
  const std::size_t cols = 2 * term_length(type);
  const Problem p = problem(814, 3, cols, type);
  Tensor1 short_x = Tensor1::from_shape({cols / 2});
  short_x.fill(1.0f);
  EXPECT_TRUE(throws_error_naming([&] { backend.quantized_gemv(p.w, short_x); },
                                  {"quantized_gemv", "x has " + std::to_string(cols / 2) + " values",
                                   "w.cols = " + std::to_string(cols)}));
  Tensor1 x = p.x;
  x(cols - 24) = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws_error_naming([&] { backend.quantized_gemv(p.w, x); }, {"quantized_gemv", "x", "non-finite"}));
  QuantizedMatrix other = ref::quantize(p.w_float, GgmlType::q4_1);
  EXPECT_TRUE(throws_error_naming([&] { backend.quantized_gemv(other, p.x); },
                                  {"quantized_gemv", "w.type (Q4_1)", "Q8_0, Q4_0 or Q4_K"}));
  QuantizedMatrix truncated = p.w;
  truncated.bytes.resize(truncated.bytes.size() - 1);
  EXPECT_TRUE(throws_error_naming([&] { backend.quantized_gemv(truncated, p.x); }, {"quantized_gemv", "q.bytes"}));
}

INSTANTIATE_TEST_SUITE_P(
    Ch08, QuantizedGemv,
    ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::quantized_gemv)),
                       ::testing::Values(GgmlType::q8_0, GgmlType::q4_0, GgmlType::q4_K)),
    [](const ::testing::TestParamInfo<std::tuple<Backend, GgmlType>>& info) {
      return std::get<0>(info.param).name + "_" + type_name(std::get<1>(info.param));
    });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(QuantizedGemv);

}  // namespace
}  // namespace tvlab::quant
