// Chapter 08, the activation side of the Q4_K product: Q8_K super-blocks (ggml's
// quantize_row_q8_K_ref) checked against their definition computed here in double, and their
// errors.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "../common/testing.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/quantized_gemv.hpp"

namespace tvlab::quant {
namespace {

using tvlab::testing::throws_error_naming;

float q8_k_d(const std::uint8_t* block) {
  std::uint32_t bits = 0;
  for (int i = 0; i < 4; ++i) bits |= static_cast<std::uint32_t>(block[i]) << (8 * i);
  float d = 0.0f;
  std::memcpy(&d, &bits, 4);
  return d;
}

int q8_k_code(const std::uint8_t* block, std::size_t l) { return static_cast<std::int8_t>(block[4 + l]); }

int q8_k_sum(const std::uint8_t* block, std::size_t g) {
  return static_cast<std::int16_t>(block[4 + 256 + 2 * g] | (block[4 + 256 + 2 * g + 1] << 8));
}

// Two super-blocks: one Gaussian with its largest magnitude negative, one with it positive. Each
// code is x_l (-127 / x_*) rounded half to even (the float product, as ggml forms it; its distance
// to the code is at most 1/2), d = 1 / (-127 / x_*), and the sums of 16 codes are their sums.
TEST(Ch08QuantizedGemv, q8_k_super_blocks_follow_their_definition) {
  Rng rng(815);
  Tensor1 x = Tensor1::from_shape({512});
  const Tensor2 draws = rng.normal_matrix(1, 512);
  std::copy(draws.begin(), draws.end(), x.begin());
  x(17) = -9.0f;   // x_* of the first super-block, negative: its codes keep their signs
  x(300) = 7.5f;   // x_* of the second, positive: its codes carry the opposite signs
  x(301) = -7.5f;  // as large as x_*, but later: x_* is the first largest
  const std::vector<std::uint8_t> blocks = ref::quantize_activations_q8_k(x);
  ASSERT_EQ(blocks.size(), 2 * ref::kQ8KBlockBytes);
  for (std::size_t b = 0; b < 2; ++b) {
    const std::uint8_t* block = blocks.data() + b * ref::kQ8KBlockBytes;
    const float largest = b == 0 ? -9.0f : 7.5f;
    const float iscale = -127.0f / largest;
    EXPECT_EQ(q8_k_d(block), 1.0f / iscale) << "super-block " << b;
    for (std::size_t l = 0; l < 256; ++l) {
      const double scaled = static_cast<double>(iscale * x(256 * b + l));
      const int code = q8_k_code(block, l);
      EXPECT_LE(std::fabs(scaled - code), 0.5) << "super-block " << b << ", value " << l;
      if (std::fabs(scaled - code) == 0.5) {
        EXPECT_EQ(code % 2, 0) << "a tie rounds to the even code";
      }
      EXPECT_LE(code, 127);
      EXPECT_GE(code, -127);
    }
    EXPECT_EQ(q8_k_code(block, b == 0 ? 17 : 44), -127) << "x_* itself gets the code -127";
    for (std::size_t g = 0; g < 16; ++g) {
      int sum = 0;
      for (std::size_t l = 0; l < 16; ++l) sum += q8_k_code(block, 16 * g + l);
      EXPECT_EQ(q8_k_sum(block, g), sum) << "super-block " << b << ", group " << g;
    }
  }
}

// x_* = -127 makes -127 / x_* = 1 exactly, so halves are ties: to the even code, as ggml's
// nearest_int (a float addition of 1.5 * 2^23) rounds them, not away from zero.
TEST(Ch08QuantizedGemv, q8_k_ties_round_to_even) {
  Tensor1 x = Tensor1::from_shape({256});
  x.fill(0.0f);
  x(0) = -127.0f;
  const float halves[] = {0.5f, 1.5f, 2.5f, -2.5f, 3.5f, -0.5f, 126.5f};
  const int even[] = {0, 2, 2, -2, 4, 0, 126};
  for (std::size_t i = 0; i < 7; ++i) x(1 + i) = halves[i];
  const std::vector<std::uint8_t> block = ref::quantize_activations_q8_k(x);
  EXPECT_EQ(q8_k_d(block.data()), 1.0f);
  for (std::size_t i = 0; i < 7; ++i) EXPECT_EQ(q8_k_code(block.data(), 1 + i), even[i]) << "x = " << halves[i];
}

// Zeros, and values too small for -127 / x_* to be a float: d = 0, codes and sums 0, no NaN.
TEST(Ch08QuantizedGemv, q8_k_of_zeros_and_of_tiny_values_is_zero) {
  for (float value : {0.0f, 1e-38f}) {
    Tensor1 x = Tensor1::from_shape({256});
    x.fill(value);
    const std::vector<std::uint8_t> block = ref::quantize_activations_q8_k(x);
    for (std::uint8_t byte : block) ASSERT_EQ(byte, 0) << "x = " << value;
  }
}

TEST(Ch08QuantizedGemv, q8_k_bad_input_is_named) {
  EXPECT_TRUE(throws_error_naming([] { ref::quantize_activations_q8_k(Tensor1::from_shape({128})); },
                                  {"quantize_activations_q8_k", "x's length (128)", "multiple of 256"}));
  Tensor1 x = Tensor1::from_shape({256});
  x.fill(1.0f);
  x(3) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { ref::quantize_activations_q8_k(x); }, {"quantize_activations_q8_k", "x", "non-finite"}));
}

}  // namespace
}  // namespace tvlab::quant
