// Chapter 08, AWQ: alpha = 0 is round-to-nearest, the search picks the grid point of least
// calibration loss, and on held-out activations of the same distribution (outlier channels) the
// chosen scaling beats round-to-nearest at INT4, group 128.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../common/testing.hpp"
#include "tvlab/analysis/awq.hpp"
#include "tvlab/analysis/outlier_quant.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::analysis {
namespace {

using tvlab::testing::throws_error_naming;

TEST(Ch08Awq, alpha_zero_is_round_to_nearest) {
  DTensor2 x, w;
  outlier_example(x, w);
  const DTensor2 rtn = awq_product(x, w, x, 0.0, 128);
  const DTensor2 q = int4_groupwise(w, 128);
  double worst = 0.0;
  for (std::size_t i = 0; i < x.shape()[0]; ++i)
    for (std::size_t k = 0; k < w.shape()[1]; ++k) {
      double y = 0.0;
      for (std::size_t j = 0; j < 256; ++j) y += x(i, j) * q(j, k);
      worst = std::max(worst, std::fabs(y - rtn(i, k)));
    }
  EXPECT_LT(worst, 1e-9);
  // every quantized weight on its group's grid: s {-7..7}, s = max|w| / 7
  for (std::size_t k = 0; k < 3; ++k) {
    double amax = 0.0;
    for (std::size_t j = 0; j < 128; ++j) amax = std::max(amax, std::fabs(w(j, k)));
    for (std::size_t j = 0; j < 128; ++j) EXPECT_NEAR(std::remainder(q(j, k) / (amax / 7.0), 1.0), 0.0, 1e-9);
  }
}

TEST(Ch08Awq, the_search_beats_round_to_nearest_on_held_out_data) {
  DTensor2 x, w;
  outlier_example(x, w);
  const DTensor2 calibration = outlier_activations(860, 128), held_out = outlier_activations(861, 64);
  const AwqSearch search = awq_search(calibration, w, 128);
  ASSERT_EQ(search.losses.size(), 21u);
  EXPECT_EQ(search.losses[static_cast<std::size_t>(std::llround(search.best_alpha * 20))],
            *std::min_element(search.losses.begin(), search.losses.end()));
  EXPECT_GT(search.best_alpha, 0.0) << "the outlier channels' weights are worth protecting";
  const double rtn = relative_output_error(held_out, w, awq_product(held_out, w, calibration, 0.0, 128));
  const double awq = relative_output_error(held_out, w, awq_product(held_out, w, calibration, search.best_alpha, 128));
  EXPECT_LT(awq, 0.8 * rtn) << "RTN " << rtn << ", AWQ (alpha " << search.best_alpha << ") " << awq;
}

TEST(Ch08Awq, bad_input_is_named) {
  DTensor2 x, w;
  outlier_example(x, w);
  EXPECT_TRUE(throws_error_naming([&] { int4_groupwise(w, 100); }, {"int4_groupwise", "group (100)", "d_in (256)"}));
  EXPECT_TRUE(throws_error_naming([&] { awq_product(x, w, x, 1.5, 128); }, {"awq_product", "alpha (1.5)"}));
  const DTensor2 narrow = xt::zeros<double>({4, 10});
  EXPECT_TRUE(throws_error_naming([&] { awq_product(narrow, w, x, 0.5, 128); }, {"awq_product", "columns"}));
}

}  // namespace
}  // namespace tvlab::analysis
