// Chapter 08, outlier activations: W8A8, LLM.int8() and SmoothQuant by their definitions (the
// decomposition is exact where it keeps floats, the smoothing leaves X W unchanged before rounding),
// and what each buys on the chapter's example, measured on the layer's output.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "../common/testing.hpp"
#include "tvlab/analysis/outlier_quant.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::analysis {
namespace {

using tvlab::testing::throws_error_naming;

DTensor2 normal_dmatrix(unsigned long long seed, std::size_t rows, std::size_t cols) {
  return Rng(seed).normal_dmatrix(rows, cols);
}

// A threshold below every |x| keeps every channel in floating point: the exact product. One above
// every |x| keeps none: vector-wise W8A8.
TEST(Ch08Outliers, llm_int8_is_exact_in_its_float_part) {
  const DTensor2 x = normal_dmatrix(851, 5, 12), w = normal_dmatrix(852, 12, 7);
  std::size_t outliers = 0;
  const DTensor2 all_float = llm_int8_product(x, w, 1e-9, &outliers);
  EXPECT_EQ(outliers, 12u);
  EXPECT_LT(relative_output_error(x, w, all_float), 1e-14);
  const DTensor2 none = llm_int8_product(x, w, 1e9, &outliers);
  EXPECT_EQ(outliers, 0u);
  EXPECT_TRUE(none == w8a8_product(x, w, Int8Scales::vector_wise));
}

// X diag(s)^-1 diag(s) W = X W for every alpha; s_j by the formula.
TEST(Ch08Outliers, smoothing_factors_are_the_formula_and_cancel) {
  const DTensor2 x = normal_dmatrix(853, 6, 10), w = normal_dmatrix(854, 10, 4);
  for (double alpha : {0.0, 0.5, 0.85, 1.0}) {
    const auto s = smoothing_factors(x, w, alpha);
    for (std::size_t j = 0; j < 10; ++j) {
      double ax = 0.0, aw = 0.0;
      for (std::size_t i = 0; i < 6; ++i) ax = std::max(ax, std::fabs(x(i, j)));
      for (std::size_t k = 0; k < 4; ++k) aw = std::max(aw, std::fabs(w(j, k)));
      EXPECT_NEAR(s[j], std::pow(ax, alpha) * std::pow(aw, alpha - 1.0), 1e-12 * s[j]);
      for (std::size_t i = 0; i < 6; ++i)
        for (std::size_t k = 0; k < 4; ++k)
          EXPECT_NEAR((x(i, j) / s[j]) * (w(j, k) * s[j]), x(i, j) * w(j, k), 1e-12);
    }
  }
}

// On the example (4 channels x 30): per-tensor W8A8 is the worst; vector-wise helps; LLM.int8()
// with tau = 6 finds exactly the 4 channels and is the best; SmoothQuant at alpha = 0.5 beats
// per-tensor W8A8 (its own baseline: one scale per tensor) several times over.
TEST(Ch08Outliers, each_method_on_the_example) {
  DTensor2 x, w;
  outlier_example(x, w);
  const double per_tensor = relative_output_error(x, w, w8a8_product(x, w, Int8Scales::per_tensor));
  const double vector_wise = relative_output_error(x, w, w8a8_product(x, w, Int8Scales::vector_wise));
  std::size_t outliers = 0;
  const double llm_int8 = relative_output_error(x, w, llm_int8_product(x, w, 6.0, &outliers));
  const double smooth = relative_output_error(x, w, smoothquant_product(x, w, 0.5));
  EXPECT_EQ(outliers, 4u);
  EXPECT_LT(vector_wise, per_tensor);
  EXPECT_LT(llm_int8, vector_wise);
  EXPECT_LT(smooth, per_tensor / 2.0) << "per tensor " << per_tensor << ", smoothed " << smooth;
  EXPECT_NEAR(relative_output_error(x, w, smoothquant_product(x, w, 0.0)), per_tensor, 0.5 * per_tensor)
      << "alpha = 0 moves nothing into the weights (only w's own range per channel)";
}

TEST(Ch08Outliers, bad_input_is_named) {
  const DTensor2 x = normal_dmatrix(855, 3, 4), w = normal_dmatrix(856, 5, 2);
  EXPECT_TRUE(throws_error_naming([&] { w8a8_product(x, w, Int8Scales::per_tensor); }, {"w8a8_product", "x has 4 columns"}));
  const DTensor2 w4 = normal_dmatrix(857, 4, 2);
  EXPECT_TRUE(throws_error_naming([&] { llm_int8_product(x, w4, 0.0); }, {"llm_int8_product", "threshold (0)"}));
  EXPECT_TRUE(throws_error_naming([&] { smoothing_factors(x, w4, 1.5); }, {"smoothing_factors", "alpha (1.5)"}));
  DTensor2 bad = x;
  bad(1, 1) = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(throws_error_naming([&] { w8a8_product(bad, w4, Int8Scales::vector_wise); }, {"w8a8_product", "x", "not finite"}));
}

}  // namespace
}  // namespace tvlab::analysis
