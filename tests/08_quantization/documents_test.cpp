// Chapter 08's document numbers, computed from their inputs: the sizes of LLaMA-2 70B's weights
// in FP16 and at 4 bits (000 L241-L243) and of DeepSeek-V3's 671B at 4 bits (004 L179), and what
// ggml's 4-bit block formats, which store a scale per 32 weights, actually take.

#include <gtest/gtest.h>

#include "backends.hpp"
#include "tvlab/core/ggml_blocks.hpp"

namespace tvlab::quant {
namespace {

double gigabytes(double parameters, double bits_per_weight) { return parameters * bits_per_weight / 8.0 / 1e9; }

TEST(Ch08Documents, llama_2_70b_in_fp16_and_int4) {
  // 70e9 weights x 2 bytes = 140 GB; x 0.5 bytes = 35 GB, 4 times smaller (000 L241-L243)
  EXPECT_DOUBLE_EQ(gigabytes(70e9, 16.0), 140.0);
  EXPECT_DOUBLE_EQ(gigabytes(70e9, 4.0), 35.0);
  // Q4_0 stores an fp16 scale per 32 weights: 4.5 bits per weight, 39.4 GB, 3.56 times smaller
  EXPECT_DOUBLE_EQ(bits_per_weight(GgmlType::q4_0), 4.5);
  EXPECT_NEAR(gigabytes(70e9, bits_per_weight(GgmlType::q4_0)), 39.375, 1e-9);
  EXPECT_NEAR(16.0 / bits_per_weight(GgmlType::q4_0), 3.5556, 1e-4);
}

TEST(Ch08Documents, deepseek_v3_at_4_bits) {
  // 671e9 x 0.5 bytes = 335.5 GB (004 L179: "about 335 GB"); Q4_0: 377.4 GB
  EXPECT_DOUBLE_EQ(gigabytes(671e9, 4.0), 335.5);
  EXPECT_NEAR(gigabytes(671e9, bits_per_weight(GgmlType::q4_0)), 377.4375, 1e-9);
}

TEST(Ch08Documents, bits_per_weight_of_the_block_formats) {
  // (2 bytes of fp16 scale [+ 2 of fp16 minimum] + packed codes) / 32 weights, in bits
  EXPECT_DOUBLE_EQ(bits_per_weight(GgmlType::q8_0), (2 + 32) * 8.0 / 32);
  EXPECT_DOUBLE_EQ(bits_per_weight(GgmlType::q4_1), (2 + 2 + 16) * 8.0 / 32);
  EXPECT_DOUBLE_EQ(bits_per_weight(GgmlType::q5_0), (2 + 4 + 16) * 8.0 / 32);
  EXPECT_DOUBLE_EQ(bits_per_weight(GgmlType::q5_1), (2 + 2 + 4 + 16) * 8.0 / 32);
}

}  // namespace
}  // namespace tvlab::quant
