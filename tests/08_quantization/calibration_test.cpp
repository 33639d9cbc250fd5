// Chapter 08, calibration (ref/calibration.hpp): the exact percentile against its definition on
// hand-sized data, the histogram percentile within half a bin of it, the percentile and MSE clips
// against min-max on Gaussian data with a few outliers (at 4 bits they win; at 8 bits the numbers
// are printed), the MSE search never worse than min-max, and bad inputs named.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "../common/testing.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/calibration.hpp"

namespace tvlab::ref {
namespace {

using tvlab::testing::throws_error_naming;

// n standard normals, `outliers` of them then replaced by values of magnitude `size` with alternating signs.
std::vector<float> gaussian_with_outliers(std::uint64_t seed, std::size_t n, std::size_t outliers, float size) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.normal());
  for (std::size_t i = 0; i < outliers; ++i)
    v[(i * 997) % n] = (i % 2 ? -size : size) * static_cast<float>(rng.uniform(0.8, 1.0));
  return v;
}

// Sorted {1, 2, 3, 4, 5}: h = 4 p / 100, P = v[floor h] + frac (v[floor h + 1] - v[floor h]).
TEST(Calibration, exact_percentile_interpolates_between_the_closest_ranks) {
  const std::vector<float> v = {5, 1, 4, 2, 3};
  EXPECT_DOUBLE_EQ(percentile(v, 50.0), 3.0);   // h = 2
  EXPECT_DOUBLE_EQ(percentile(v, 90.0), 4.6);   // h = 3.6: 4 + 0.6 (5 - 4)
  EXPECT_DOUBLE_EQ(percentile(v, 10.0), 1.4);   // h = 0.4
  EXPECT_DOUBLE_EQ(percentile(v, 100.0), 5.0);  // h = 4: the maximum
  EXPECT_DOUBLE_EQ(percentile(std::vector<float>{7.0f}, 99.9), 7.0);
  // symmetric: c = P_p(|x|); asymmetric: [P_(100-p)(x), P_p(x)], widened to 0
  const std::vector<float> w = {-4, -1, 0, 1, 2, 3, 8};
  const ClipRange sym = calibrate_percentile(w, 50.0, true);  // |w| sorted 0 1 1 2 3 4 8: h = 3
  EXPECT_DOUBLE_EQ(sym.hi, 2.0);
  EXPECT_DOUBLE_EQ(sym.lo, -2.0);
  const ClipRange asym = calibrate_percentile(w, 90.0, false);  // h = 5.4 and 0.6
  EXPECT_DOUBLE_EQ(asym.hi, 3.0 + 0.4 * 5.0);
  EXPECT_DOUBLE_EQ(asym.lo, -4.0 + 0.6 * 3.0);
  EXPECT_DOUBLE_EQ(calibrate_percentile(std::vector<float>{1, 2, 3}, 10.0, false).lo, 0.0);  // widened to 0
}

// Each order statistic is replaced by the centre of its bin, within w/2 of it; the interpolation
// between two of them is then within w/2 of the exact percentile. The slack 1e-9 w covers the
// double rounding of (x - min) / w at bin edges.
TEST(Calibration, histogram_percentile_is_within_half_a_bin_of_the_exact_one) {
  const std::vector<float> v = gaussian_with_outliers(821, 4096, 8, 12.0f);
  double lo = v[0], hi = v[0];
  for (float x : v) lo = std::min<double>(lo, x), hi = std::max<double>(hi, x);
  for (std::size_t bins : {1, 7, 64, 2048, 100000})
    for (double p : {0.5, 10.0, 50.0, 99.0, 99.9, 99.99, 100.0}) {
      const double w = (hi - lo) / bins;
      const double exact = percentile(v, p), binned = histogram_percentile(v, p, bins);
      EXPECT_LE(std::fabs(binned - exact), w / 2 + 1e-9 * w) << bins << " bins, p = " << p;
    }
  EXPECT_EQ(histogram_percentile(std::vector<float>{2, 2, 2}, 50.0, 10), 2.0);
  // calibrate_percentile with bins uses the histogram of |x|
  const ClipRange h = calibrate_percentile(v, 99.9, true, 512), e = calibrate_percentile(v, 99.9, true);
  EXPECT_LE(std::fabs(h.hi - e.hi), 12.0 / 512);
}

double mse(const std::vector<float>& v, ClipRange r, int bits) { return quantization_mse(v, r, bits, true); }

// 4100 N(0, 1) values, 4 of them replaced by outliers of magnitude 9.6 to 12 (0.1%). At 4 bits
// min-max spends its 7 steps on [0, 12]: s ~ 1.7, and most of the Gaussian rounds to 0 or +-s.
// The 99.9th percentile of |x| (h = 4099 x 0.999 = 4094.9, just below the outliers' ranks
// 4096..4099) lies on the Gaussian's largest values (4.2 here): the 4 outliers are clipped by ~7
// each but the rest gets s ~ 0.6, less error in total. At 8 bits min-max's step (0.09) already
// costs little (s^2 / 12 ~ 7e-4) while clipping 4 outliers by ~7 costs about 4 x 49 / 4100 ~ 0.05:
// the percentile clip loses; the MSE search still wins a little (it is never worse than min-max).
// Measured: 4 bits MSE 0.2415 (min-max), 0.0700 (p99.9), 0.0687 (MSE clip, c = 3.71);
// 8 bits 0.00075, 0.0401, 0.00073 (c = 11.72).
TEST(Calibration, percentile_and_mse_clips_against_min_max_with_outliers) {
  const std::vector<float> v = gaussian_with_outliers(822, 4100, 4, 12.0f);
  for (int bits : {4, 8}) {
    const double m = mse(v, calibrate_min_max(v, true), bits);
    const double p = mse(v, calibrate_percentile(v, 99.9, true), bits);
    const ClipRange best = calibrate_mse(v, bits, true);
    const double o = mse(v, best, bits);
    std::printf("[ numbers  ] %d bits, 4100 N(0,1) values, 4 of them outliers ~12: MSE min-max %.5f (c = %.3f), "
                "p99.9 %.5f (c = %.3f), MSE-optimal %.5f (c = %.3f)\n",
                bits, m, calibrate_min_max(v, true).hi, p, calibrate_percentile(v, 99.9, true).hi, o, best.hi);
    EXPECT_LE(o, m) << bits << " bits";
    EXPECT_LE(o, p + 1e-12) << bits << " bits: the percentile clip (or one near it) is on the grid";
    if (bits == 4) {
      EXPECT_LT(p, 0.5 * m);
      EXPECT_LT(o, 0.5 * m);
    } else {
      EXPECT_GT(p, m) << "at 8 bits the clipped outliers should cost more than the rounding they save";
    }
  }
}

// The grid's last candidate is min-max itself, so the minimum over the grid is at most its loss;
// on every data set, bits and mode.
TEST(Calibration, mse_search_is_never_worse_than_min_max) {
  Rng rng(823);
  for (int trial = 0; trial < 40; ++trial) {
    const std::size_t n = 1 + static_cast<std::size_t>(rng.uniform(0, 300));
    std::vector<float> v(n);
    for (float& x : v) x = static_cast<float>(rng.normal() * (rng.uniform() < 0.05 ? 30.0 : 1.0) + (trial % 3) * 0.7);
    for (int bits = 2; bits <= 8; ++bits)
      for (bool symmetric : {true, false}) {
        const double m = quantization_mse(v, calibrate_min_max(v, symmetric), bits, symmetric);
        const double o = quantization_mse(v, calibrate_mse(v, bits, symmetric, 50), bits, symmetric);
        ASSERT_LE(o, m) << "trial " << trial << ", n = " << n << ", " << bits << " bits, symmetric " << symmetric;
      }
  }
  const std::vector<float> zeros(16, 0.0f);
  EXPECT_EQ(quantization_mse(zeros, calibrate_mse(zeros, 4, false), 4, false), 0.0);
}

// The loss is the definition: (1/n) sum (x - s (q - z))^2 by hand for s = 1, z = 0 (3 bits, c = 3).
TEST(Calibration, quantization_mse_is_the_mean_squared_error) {
  const std::vector<float> v = {0.2f, -1.6f, 2.5f, 5.0f};
  // codes 0, -2, 2 (tie to even), 3 (clipped): errors 0.2, 0.4, 0.5, 2
  const double expected = (0.04 + 0.16 + 0.25 + 4.0) / 4;
  EXPECT_NEAR(quantization_mse(v, {-3.0, 3.0}, 3, true), expected, 1e-7);  // float inputs: 1e-7
}

TEST(Calibration, bad_input_is_named) {
  const std::vector<float> v = {1, 2, 3};
  const std::vector<float> empty;
  for (double p : {0.0, -1.0, 100.5, std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_TRUE(throws_error_naming([&] { percentile(v, p); }, {"percentile", "p ("}));
    EXPECT_TRUE(throws_error_naming([&] { histogram_percentile(v, p, 10); }, {"p ("}));
    EXPECT_TRUE(throws_error_naming([&] { calibrate_percentile(v, p, true); }, {"calibrate_percentile", "p ("}));
  }
  EXPECT_TRUE(throws_error_naming([&] { percentile(empty, 50); }, {"data", "empty"}));
  EXPECT_TRUE(throws_error_naming([&] { calibrate_min_max(empty, true); }, {"calibrate_min_max", "empty"}));
  EXPECT_TRUE(throws_error_naming([&] { calibrate_mse(empty, 4, true); }, {"calibrate_mse", "empty"}));
  EXPECT_TRUE(throws_error_naming([&] { quantization_mse(empty, {-1, 1}, 4, true); }, {"empty"}));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    const std::vector<float> w = {1, bad, 3};
    EXPECT_TRUE(throws_error_naming([&] { percentile(w, 50); }, {"non-finite", "index 1"}));
    EXPECT_TRUE(throws_error_naming([&] { histogram_percentile(w, 50, 8); }, {"non-finite"}));
    EXPECT_TRUE(throws_error_naming([&] { calibrate_min_max(w, false); }, {"non-finite"}));
    EXPECT_TRUE(throws_error_naming([&] { calibrate_percentile(w, 50, false); }, {"non-finite"}));
    EXPECT_TRUE(throws_error_naming([&] { calibrate_mse(w, 4, false); }, {"non-finite"}));
  }
  EXPECT_TRUE(throws_error_naming([&] { histogram_percentile(v, 50, 0); }, {"bins (0)"}));
  EXPECT_TRUE(throws_error_naming([&] { calibrate_mse(v, 4, true, 0); }, {"K (0)"}));
  EXPECT_TRUE(throws_error_naming([&] { calibrate_mse(v, 9, true); }, {"bits (9)"}));
  EXPECT_TRUE(throws_error_naming([&] { quantization_mse(v, {0.5, 1}, 4, true); }, {"range"}));
}

}  // namespace
}  // namespace tvlab::ref
