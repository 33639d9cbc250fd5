// Chapter 08, incoherence processing: the randomized Hadamard rotation is orthogonal (the inverse
// gives W back, the norm is kept, H of size 2 by hand), it spreads an outlier (the coherence falls),
// and on weights with outliers it lowers the error of plain rounding at 2 and 4 bits.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "../common/testing.hpp"
#include "tvlab/analysis/incoherence.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::analysis {
namespace {

using tvlab::testing::throws_error_naming;

DTensor2 with_outliers(unsigned long long seed, std::size_t m, std::size_t n) {
  Rng rng(seed);
  DTensor2 w = DTensor2::from_shape({m, n});
  for (auto& v : w) v = rng.normal() * (rng.uniform() < 0.005 ? 10.0 : 1.0);
  return w;
}

TEST(Ch08Incoherence, the_rotation_is_orthogonal) {
  const DTensor2 w = with_outliers(870, 16, 32);
  const DTensor2 r = incoherent_rotation(w, 5, false), back = incoherent_rotation(r, 5, true);
  double norm_w = 0.0, norm_r = 0.0, worst = 0.0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    norm_w += w.data()[i] * w.data()[i];
    norm_r += r.data()[i] * r.data()[i];
    worst = std::max(worst, std::fabs(back.data()[i] - w.data()[i]));
  }
  EXPECT_NEAR(norm_r, norm_w, 1e-10 * norm_w) << "a rotation keeps the Frobenius norm";
  EXPECT_LT(worst, 1e-12) << "U^T (U W V^T) V = W";
  // 1 x 2 by hand: [a, b] times D_2 H_2 (H_2 = [[1, 1], [1, -1]] / sqrt 2) up to the random signs:
  // the entries are (+-a +- b) / sqrt 2 with both signs of b appearing
  const DTensor2 two = {{3.0, 1.0}};
  const DTensor2 r2 = incoherent_rotation(two, 9, false);
  EXPECT_NEAR(std::fabs(r2(0, 0)) + std::fabs(r2(0, 1)), (4.0 + 2.0) / std::sqrt(2.0), 1e-12);
}

// 0.5% of the weights x 10: the largest entry is 28 times the root mean square, 4.3 times after
// the rotation. At 3, 4 and 8 bits the rotated weights round with a third to a half of the error
// (0.56 -> 0.30, 0.35 -> 0.13, 0.020 -> 0.007); at 2 bits, three levels, plain rounding of the now
// Gaussian-looking entries is no better than before (0.77 -> 0.81): the reason QuIP# pairs the
// rotation with a lattice codebook instead of scalar rounding.
TEST(Ch08Incoherence, outliers_are_spread_and_rounding_improves) {
  const DTensor2 w = with_outliers(871, 128, 256);
  const DTensor2 r = incoherent_rotation(w, 7, false);
  EXPECT_GT(coherence(w), 20.0);
  EXPECT_LT(coherence(r), 6.0) << "an entry of the rotated matrix mixes a whole row and column";
  Rng rng(874);
  DTensor2 x = DTensor2::from_shape({256, 32});
  for (auto& v : x) v = rng.normal();
  for (const IncoherenceRow& row : incoherence_table(w, {3, 4, 8}, 7, x)) {
    EXPECT_LT(row.rotated, 0.6 * row.direct) << row.bits << " bits: direct " << row.direct << ", rotated " << row.rotated;
    EXPECT_LT(row.output_rotated, 0.6 * row.output_direct)
        << row.bits << " bits, the layer's output: direct " << row.output_direct << ", rotated " << row.output_rotated;
  }
  const IncoherenceRow two = incoherence_table(w, {2}, 7, x)[0];
  EXPECT_GT(two.rotated, 0.9 * two.direct) << "2 bits: scalar rounding gains nothing from the rotation";
  EXPECT_GT(two.output_rotated, 0.9 * two.output_direct);
}

// The output error is its definition: computed here from an explicit product, and 0 for W itself.
TEST(Ch08Incoherence, the_output_error_is_the_relative_error_of_w_x) {
  const DTensor2 w = with_outliers(875, 4, 8), w_hat = round_rows(w, 3);
  Rng rng(876);
  DTensor2 x = DTensor2::from_shape({8, 3});
  for (auto& v : x) v = rng.normal();
  double err = 0.0, ref = 0.0;
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t c = 0; c < 3; ++c) {
      double y = 0.0, y_hat = 0.0;
      for (std::size_t j = 0; j < 8; ++j) y += w(r, j) * x(j, c), y_hat += w_hat(r, j) * x(j, c);
      err += (y - y_hat) * (y - y_hat), ref += y * y;
    }
  EXPECT_NEAR(weight_output_error(w, w_hat, x), std::sqrt(err / ref), 1e-12);
  EXPECT_EQ(weight_output_error(w, w, x), 0.0);
  EXPECT_TRUE(throws_error_naming([&] { weight_output_error(w, w_hat, DTensor2::from_shape({4, 3})); },
                                  {"weight_output_error", "x has 4 rows", "(8)"}));
  EXPECT_TRUE(throws_error_naming([&] { weight_output_error(w, w_hat, DTensor2(xt::zeros<double>({8, 3}))); },
                                  {"weight_output_error", "all zero"}));
}

TEST(Ch08Incoherence, bad_input_is_named) {
  const DTensor2 w = with_outliers(872, 12, 16);
  EXPECT_TRUE(throws_error_naming([&] { incoherent_rotation(w, 1, false); }, {"incoherent_rotation", "12 x 16", "powers of two"}));
  EXPECT_TRUE(throws_error_naming([&] { round_rows(w, 9); }, {"round_rows", "bits (9)"}));
  DTensor2 bad = with_outliers(873, 4, 4);
  bad(1, 1) = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { incoherent_rotation(bad, 1, false); }, {"incoherent_rotation", "not finite"}));
}

}  // namespace
}  // namespace tvlab::analysis
