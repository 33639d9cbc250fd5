// The figures' axis ticks (chapters/common/svg.hpp): round values, labels without spurious digits.
// Expected steps are found here by brute force over every 1-2-5 step, independently of the code.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/svg.hpp"
#include "tvlab/core/error.hpp"

namespace {

using tvlab::cli::AxisTicks;
using tvlab::cli::linear_ticks;
using tvlab::cli::log10_ticks;

// The smallest step c * 10^e (c in 1, 2, 5) whose multiples cover [lo, hi] with at most max_ticks.
double smallest_nice_step(double lo, double hi, int max_ticks) {
  for (int e = -12; e <= 12; ++e)
    for (int c : {1, 2, 5}) {
      const double step = c * std::pow(10.0, e);
      const long first = std::lround(std::floor(lo / step + 1e-9)), last = std::lround(std::ceil(hi / step - 1e-9));
      if (last - first + 1 <= max_ticks) return step;
    }
  return NAN;
}

struct Range {
  double lo, hi;
};

TEST(SvgTicks, LinearTicksAreMultiplesOfTheSmallestNiceStep) {
  // The ranges of the chapters' figures (1.22, 0.13, 3.5, -33.5) and a few awkward ones.
  for (Range r : {Range{0, 1.22}, Range{0, 0.13}, Range{0, 3.5}, Range{-33.5, 0}, Range{0, 1}, Range{0.001, 0.0042},
                  Range{-7, 13}, Range{100, 4616.15}, Range{0, 255}}) {
    const AxisTicks t = linear_ticks(r.lo, r.hi, 8);
    const double step = smallest_nice_step(r.lo, r.hi, 8);
    SCOPED_TRACE("range [" + std::to_string(r.lo) + ", " + std::to_string(r.hi) + "], expected step " + std::to_string(step));
    ASSERT_GE(t.values.size(), 2u);
    ASSERT_LE(t.values.size(), 8u);
    ASSERT_EQ(t.labels.size(), t.values.size());
    EXPECT_LE(t.values.front(), r.lo + 1e-12) << "the first tick must not cut the data";
    EXPECT_GE(t.values.back(), r.hi - 1e-12) << "the last tick must not cut the data";
    for (std::size_t k = 0; k < t.values.size(); ++k) {
      EXPECT_NEAR(t.values[k] / step, std::round(t.values[k] / step), 1e-9) << "tick " << t.values[k] << " is not a multiple of the step";
      if (k > 0) {
        EXPECT_NEAR(t.values[k] - t.values[k - 1], step, 1e-9 * step);
      }
      // The label reads back as the tick, with no digit beyond the step's.
      EXPECT_NEAR(std::stod(t.labels[k]), t.values[k], 1e-9 * std::max(1.0, std::abs(t.values[k])));
      const auto point = t.labels[k].find('.');
      const int digits = point == std::string::npos ? 0 : static_cast<int>(t.labels[k].size() - point - 1);
      EXPECT_EQ(digits, std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)))) << "label " << t.labels[k];
    }
  }
}

TEST(SvgTicks, LinearLabelsOfTheRangeZeroToOnePointTwoTwo) {
  // Step 0.2 (0.1 would need 14 ticks): 0, 0.2, ..., 1.4.
  const AxisTicks t = linear_ticks(0, 1.22, 8);
  EXPECT_EQ(t.labels, (std::vector<std::string>{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0", "1.2", "1.4"}));
}

TEST(SvgTicks, LogTicksOverManyDecadesArePowersOfTen) {
  const AxisTicks t = log10_ticks(1.7, 4616.15, 8);
  EXPECT_EQ(t.labels, (std::vector<std::string>{"1", "10", "100", "1000", "10000"}));
  for (double v : t.values) EXPECT_NEAR(std::log10(v), std::round(std::log10(v)), 1e-12);
  // Twenty decades do not fit 8 ticks: every fifth power (every second would need 12, from 1e-10
  // to 1e12), from the last multiple of five at or below -9 to the first at or above 11.
  const AxisTicks wide = log10_ticks(1e-9, 1e11, 8);
  EXPECT_EQ(wide.labels, (std::vector<std::string>{"1e-10", "1e-5", "1", "100000", "1e10", "1e15"}));
}

TEST(SvgTicks, LogTicksOverLessThanTwoDecadesAreOneTwoFive) {
  // A ratio from 1/4 to 1 (RoPE's scaled frequencies): 0.2, 0.5, 1.
  EXPECT_EQ(log10_ticks(0.25, 1, 8).labels, (std::vector<std::string>{"0.2", "0.5", "1"}));
  EXPECT_EQ(log10_ticks(0.13, 1.22, 8).labels, (std::vector<std::string>{"0.1", "0.2", "0.5", "1", "2"}));
}

TEST(SvgTicks, BadInputNamesTheParameter) {
  EXPECT_THROW(
      try { log10_ticks(0, 1); } catch (const tvlab::Error& e) {
        EXPECT_NE(std::string(e.what()).find("lo and hi must be finite and positive"), std::string::npos) << e.what();
        throw;
      },
      tvlab::Error);
  EXPECT_THROW(linear_ticks(0, INFINITY), tvlab::Error);
  EXPECT_THROW(linear_ticks(0, 1, 1), tvlab::Error);
}

}  // namespace
