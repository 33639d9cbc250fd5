// Chapter 08, NVFP4: the scales by their definitions, a tensor of E2M1 values under exact scales
// comes back exactly, an all-zero tensor gives zeros, the error on the lesson's weights against
// MXFP4, and bad input.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "../common/testing.hpp"
#include "tvlab/analysis/quant_error.hpp"
#include "tvlab/ref/fp8.hpp"
#include "tvlab/ref/microscaling.hpp"
#include "tvlab/ref/nvfp4.hpp"

namespace tvlab::ref {
namespace {

using tvlab::testing::throws_error_naming;

// Block 0 holds E2M1's values 0.5 .. 6 (and their negatives), block 1 the same times 1/4: max|x| =
// 6, g = 6 / (6 * 448) = 1/448, block scales 448 and 112 (both E4M3 values), and every x / (s_b g)
// is an E2M1 value, so the round trip is exact.
TEST(Ch08Nvfp4, exact_values_come_back_exactly) {
  const float e2m1[8] = {0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, 0.0f};
  Tensor1 x = Tensor1::from_shape({32});
  for (std::size_t i = 0; i < 16; ++i) {
    x(i) = (i % 2 ? -1.0f : 1.0f) * e2m1[i % 8];
    x(16 + i) = 0.25f * x(i);
  }
  const Nvfp4Tensor q = nvfp4_quantize(x);
  EXPECT_FLOAT_EQ(q.global_scale, 6.0f / (6.0f * 448.0f));
  EXPECT_EQ(fp8_decode(q.block_scales[0], Fp8Format::e4m3), 448.0f);
  EXPECT_EQ(fp8_decode(q.block_scales[1], Fp8Format::e4m3), 112.0f);
  const Tensor1 back = nvfp4_dequantize(q);
  for (std::size_t i = 0; i < 32; ++i) EXPECT_FLOAT_EQ(back(i), x(i)) << i;
  const Tensor1 zeros = nvfp4_dequantize(nvfp4_quantize(xt::zeros<float>({std::size_t{16}})));
  for (float v : zeros) EXPECT_EQ(v, 0.0f);
}

// On the lesson's weights NVFP4 (4.5 bits) beats MXFP4 (4.25 bits): blocks of 16 and a scale with
// a mantissa. Measured: about 0.095 against 0.115 on N(0, 1).
TEST(Ch08Nvfp4, finer_blocks_and_scales_beat_mxfp4) {
  for (bool outliers : {false, true}) {
    const Tensor2 x = analysis::lesson_weights(outliers);
    EXPECT_LT(nvfp4_round_trip_rmse(x), 0.9 * mx_round_trip_rmse(x, MxBlockFormat::mxfp4)) << "outliers " << outliers;
  }
}

TEST(Ch08Nvfp4, bad_input_is_named) {
  EXPECT_TRUE(throws_error_naming([] { nvfp4_quantize(Tensor1::from_shape({24})); }, {"nvfp4_quantize", "length (24)", "16"}));
  Tensor1 x = xt::ones<float>({std::size_t{16}});
  x(3) = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws_error_naming([&] { nvfp4_quantize(x); }, {"nvfp4_quantize", "x"}));
  Nvfp4Tensor q = nvfp4_quantize(xt::ones<float>({std::size_t{16}}));
  q.elements.pop_back();
  EXPECT_TRUE(throws_error_naming([&] { nvfp4_dequantize(q); }, {"nvfp4_dequantize", "16 elements per scale"}));
}

}  // namespace
}  // namespace tvlab::ref
