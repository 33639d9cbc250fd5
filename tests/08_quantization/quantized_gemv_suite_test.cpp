// Chapter 08, the quantized matrix-vector product over every backend of the registry (the CUDA
// cases skip without a device, except the checks made before any device call): the same bits
// as the reference (integer dots inside blocks, the float terms and their sum in one order), a tight
// check against the double-precision dot of the dequantized operands, a loose one against the
// original floats with the quantization error bounded from the operands, and bad input.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
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

// The dequantized activations: what the integer codes of x stand for.
Tensor1 dequantized_activations(const Tensor1& x) {
  const std::vector<std::uint8_t> blocks = ref::quantize_activations_q8_0(x);
  Tensor1 out = Tensor1::from_shape({x.size()});
  for (std::size_t b = 0; b < x.size() / 32; ++b)
    ref::dequantize_block(GgmlType::q8_0, blocks.data() + b * 34, out.data() + b * 32);
  return out;
}

class QuantizedGemv : public ::testing::TestWithParam<std::tuple<Backend, GgmlType>> {};

// 37 rows (not a multiple of the four rows the optimized kernel runs together) and 13 blocks per
// row (not a multiple of its eight), then a wide one.
TEST_P(QuantizedGemv, bits_match_the_reference) {
  const auto& [backend, type] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  for (const auto& [rows, cols] : {std::pair<std::size_t, std::size_t>{37, 13 * 32}, {9, 160 * 32}}) {
    const Problem p = problem(811 + rows, rows, cols, type);
    const Tensor1 got = backend.quantized_gemv(p.w, p.x), expected = ref::quantized_gemv(p.w, p.x);
    ASSERT_EQ(got.size(), rows);
    for (std::size_t r = 0; r < rows; ++r)
      ASSERT_EQ(got(r), expected(r)) << backend.name << ", " << type_name(type) << ", " << rows << " x " << cols
                                     << ": row " << r << " (the integer dots are exact, so a difference is the order "
                                        "or rounding of the float terms and their sum)";
  }
}

// Against sum_j w^_rj x^_j in double, the same numbers as the codes: each block's float term is
// rounded twice (the product of the scales or of sumi and d_w, then the second product), at most
// 2u of the term (u = 2^-24), and the B - 1 additions in order add at most (B - 1) u of the sum of
// |terms|: |y - exact| <= (B + 1) u sum_b |term_b|.
TEST_P(QuantizedGemv, equals_the_dot_of_the_dequantized_operands_to_float_rounding) {
  const auto& [backend, type] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const std::size_t rows = 23, cols = 64 * 32, blocks = cols / 32;
  const Problem p = problem(812, rows, cols, type);
  const Tensor2 w_hat = ref::dequantize(p.w);
  const Tensor1 x_hat = dequantized_activations(p.x);
  const Tensor1 y = backend.quantized_gemv(p.w, p.x);
  const double u = std::ldexp(1.0, -24);
  for (std::size_t r = 0; r < rows; ++r) {
    double exact = 0.0, sum_abs_terms = 0.0;
    for (std::size_t b = 0; b < blocks; ++b) {
      double term = 0.0;
      for (std::size_t j = 0; j < 32; ++j) term += static_cast<double>(w_hat(r, b * 32 + j)) * x_hat(b * 32 + j);
      exact += term;
      sum_abs_terms += std::fabs(term);
    }
    const double bound = (static_cast<double>(blocks) + 1.0) * u * sum_abs_terms;
    EXPECT_LE(std::fabs(y(r) - exact), bound)
        << backend.name << ", " << type_name(type) << ": row " << r << " gives " << y(r) << ", the dequantized "
        << "operands' dot is " << exact << "; a kernel that drops a block, misreads a nibble or forgets Q4_0's "
        << "offset of 8 lands far outside this float-rounding bound";
  }
}

// Against W x of the original floats: |W x - W^ x^| <= sum_j |w - w^| |x| + |w^| |x - x^| (the
// triangle inequality, computed here in double from the operands), plus the float bound above.
TEST_P(QuantizedGemv, stays_within_the_quantization_error_of_both_operands) {
  const auto& [backend, type] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const std::size_t rows = 11, cols = 32 * 32;
  const Problem p = problem(813, rows, cols, type);
  const Tensor2 w_hat = ref::dequantize(p.w);
  const Tensor1 x_hat = dequantized_activations(p.x);
  const Tensor1 y = backend.quantized_gemv(p.w, p.x);
  for (std::size_t r = 0; r < rows; ++r) {
    double exact = 0.0, bound = 0.0, magnitude = 0.0;
    for (std::size_t j = 0; j < cols; ++j) {
      const double w = p.w_float(r, j), x = p.x(j);
      exact += w * x;
      bound += std::fabs(w - w_hat(r, j)) * std::fabs(x) + std::fabs(w_hat(r, j)) * std::fabs(x - x_hat(j));
      magnitude += std::fabs(w_hat(r, j) * x_hat(j));
    }
    bound += (cols / 32.0 + 1.0) * std::ldexp(1.0, -24) * magnitude;
    EXPECT_LE(std::fabs(y(r) - exact), bound) << backend.name << ", " << type_name(type) << ": row " << r;
  }
}

TEST_P(QuantizedGemv, bad_input_is_named) {
  const auto& [backend, type] = GetParam();
  const Problem p = problem(814, 3, 64, type);
  Tensor1 short_x = Tensor1::from_shape({32});
  short_x.fill(1.0f);
  EXPECT_TRUE(throws_error_naming([&] { backend.quantized_gemv(p.w, short_x); },
                                  {"quantized_gemv", "x has 32 values", "w.cols = 64"}));
  Tensor1 x = p.x;
  x(40) = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws_error_naming([&] { backend.quantized_gemv(p.w, x); }, {"quantized_gemv", "x", "non-finite"}));
  QuantizedMatrix other = ref::quantize(p.w_float, GgmlType::q4_1);
  EXPECT_TRUE(throws_error_naming([&] { backend.quantized_gemv(other, p.x); },
                                  {"quantized_gemv", "w.type (Q4_1)", "Q8_0 or Q4_0"}));
  QuantizedMatrix truncated = p.w;
  truncated.bytes.resize(truncated.bytes.size() - 1);
  EXPECT_TRUE(throws_error_naming([&] { backend.quantized_gemv(truncated, p.x); }, {"quantized_gemv", "q.bytes"}));
}

INSTANTIATE_TEST_SUITE_P(
    Ch08, QuantizedGemv,
    ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::quantized_gemv)),
                       ::testing::Values(GgmlType::q8_0, GgmlType::q4_0)),
    [](const ::testing::TestParamInfo<std::tuple<Backend, GgmlType>>& info) {
      return std::get<0>(info.param).name + "_" + type_name(std::get<1>(info.param));
    });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(QuantizedGemv);

}  // namespace
}  // namespace tvlab::quant
