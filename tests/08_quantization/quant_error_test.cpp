// Chapter 08, the RMSE table of the lesson (analysis/quant_error.hpp): symmetric INT8 and INT4,
// per tensor, per channel, per group of 32 and of 128, with min-max, 99.9th-percentile and
// MSE-optimal clipping, on a 256 x 1024 Gaussian matrix and on the same with 1% outliers x 20.
// The test prints both tables (run `test_08_quantization --gtest_filter='QuantError.*'`) and
// checks what must hold whatever the data: the MSE clip is never worse than min-max (its grid
// includes min-max, and the total squared error is the sum of the groups'), INT4 is worse than
// INT8, and the table's RMSE is the one computed element by element from quantize_affine.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "tvlab/analysis/quant_error.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/calibration.hpp"

namespace tvlab::analysis {
namespace {

void print_table(const char* title, const std::vector<QuantErrorRow>& rows) {
  std::printf("\n%s\n| bits | granularity   | min-max  | p99.9    | MSE      |\n", title);
  std::printf("| ---- | ------------- | -------- | -------- | -------- |\n");
  for (std::size_t i = 0; i + 2 < rows.size(); i += 3)
    std::printf("| %4d | %-13s | %.6f | %.6f | %.6f |\n", rows[i].bits, rows[i].granularity.c_str(), rows[i].rmse,
                rows[i + 1].rmse, rows[i + 2].rmse);
}

void check_table(const std::vector<QuantErrorRow>& rows) {
  ASSERT_EQ(rows.size(), 24u);
  for (std::size_t i = 0; i < rows.size(); i += 3) {
    ASSERT_EQ(rows[i].rule, ClipRule::min_max);
    ASSERT_EQ(rows[i + 2].rule, ClipRule::mse);
    // relative 1e-6: the table's x^ is rounded to float, the search's loss is not
    EXPECT_LE(rows[i + 2].rmse, rows[i].rmse * (1 + 1e-6)) << rows[i].bits << " bits, " << rows[i].granularity;
  }
  for (std::size_t i = 0; i < 12; ++i) EXPECT_GT(rows[i + 12].rmse, rows[i].rmse) << "INT4 against INT8, row " << i;
}

TEST(QuantError, lesson_table_gaussian) {
  const auto rows = quant_error_table(lesson_weights(false));
  print_table("RMSE, x = Rng(808).normal_matrix(256, 1024), symmetric", rows);
  check_table(rows);
}

TEST(QuantError, lesson_table_with_outliers) {
  const auto rows = quant_error_table(lesson_weights(true));
  print_table("RMSE, the same with 1% of elements x 20, symmetric", rows);
  check_table(rows);
  // with outliers at 4 bits one scale per tensor is set by the largest outlier: every finer
  // granularity and every clip must do better than per-tensor min-max
  for (std::size_t i = 13; i < 24; ++i) EXPECT_LT(rows[i].rmse, rows[12].rmse) << rows[i].granularity;
}

// The RMSE is sqrt(mean (x - x^)^2) of the dequantized matrix, recomputed here from its parts.
TEST(QuantError, rmse_is_the_definition) {
  Rng rng(809);
  const Tensor2 x = rng.normal_matrix(4, 64);
  const ref::AffineQuantConfig cfg{.bits = 4, .granularity = ref::Granularity::per_group, .group_size = 16};
  const auto ranges = calibrate_groups(x, cfg, ClipRule::percentile, 90.0);
  ASSERT_EQ(ranges.size(), 16u);
  const Tensor2 magnitudes = xt::abs(x);  // symmetric: c = P_90(|x|) of each group of 16
  for (std::size_t g = 0; g < 16; ++g)
    EXPECT_DOUBLE_EQ(ranges[g].hi, ref::percentile(std::span<const float>(magnitudes.data() + 16 * g, 16), 90.0));
  const Tensor2 back = ref::dequantize_affine(ref::quantize_affine(x, cfg, ranges));
  double sum = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) sum += std::pow(double(x.data()[i]) - back.data()[i], 2);
  EXPECT_DOUBLE_EQ(affine_rmse(x, cfg, ClipRule::percentile, 90.0), std::sqrt(sum / x.size()));
  EXPECT_EQ(clip_rule_name(ClipRule::percentile), "p99.9");
}

}  // namespace
}  // namespace tvlab::analysis
