// Chapter 04: the polynomial 2^x of flash attention v3 (opt::fast_exp2) against 2^x in double,
// over its whole range, at the points where its parts meet, and on bad input.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/opt/fast_exp.hpp"

namespace tvlab::ch04 {
namespace {

// The largest relative error of fast_exp2 on x, against std::exp2 in double.
double worst_relative_error(const std::vector<float>& x) {
  const std::vector<float> y = opt::fast_exp2(x);
  double worst = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double exact = std::exp2(static_cast<double>(x[i]));
    worst = std::max(worst, std::abs(static_cast<double>(y[i]) - exact) / exact);
  }
  return worst;
}

TEST(Ch04FastExp2, relative_error_stays_below_the_stated_bound_over_the_whole_range) {
  // Two million points over [-126, 128), a non-multiple spacing so that every position of the
  // reduced argument r = x - round(x) in [-1/2, 1/2] is visited many times.
  std::vector<float> x;
  for (double value = -126.0; value < 127.999; value += 1.27e-4) x.push_back(static_cast<float>(value));
  const double worst = worst_relative_error(x);
  EXPECT_LT(worst, opt::kFastExp2MaxRelativeError) << "over " << x.size() << " points";
  // A bound far from the measured error would say nothing: it is within 20% of it.
  EXPECT_GT(worst, 0.8 * opt::kFastExp2MaxRelativeError);
}

TEST(Ch04FastExp2, exact_where_the_softmax_needs_it_and_zero_below_the_normal_floats) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // 2^0 = 1 is the weight of a row's maximum; every integer power of two comes out exact (r = 0).
  const std::vector<float> x = {0.0f, 1.0f, -1.0f, -126.0f, 127.0f, -126.5f, -127.0f, -1000.0f, kNegInf, -0.5f, 0.5f};
  const std::vector<float> y = opt::fast_exp2(x);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 2.0f);
  EXPECT_EQ(y[2], 0.5f);
  EXPECT_EQ(y[3], std::ldexp(1.0f, -126));
  EXPECT_EQ(y[4], std::ldexp(1.0f, 127));
  // Below -126 the result would be subnormal: 0, as for a hidden score (-inf).
  for (std::size_t i = 5; i <= 8; ++i) EXPECT_EQ(y[i], 0.0f) << "x = " << x[i];
  // The two ends of the polynomial's interval, r = -1/2 and r = 1/2.
  EXPECT_NEAR(y[9], std::sqrt(0.5), opt::kFastExp2MaxRelativeError * std::sqrt(0.5));
  EXPECT_NEAR(y[10], std::sqrt(2.0), opt::kFastExp2MaxRelativeError * std::sqrt(2.0));
}

TEST(Ch04FastExp2, any_length_gives_the_same_values_as_whole_registers) {
  // Lengths that leave every possible partial register at the end.
  std::vector<float> all(67);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = -0.37f * static_cast<float>(i);
  const std::vector<float> whole = opt::fast_exp2(all);
  for (std::size_t n = 0; n <= all.size(); ++n) {
    const std::vector<float> part = opt::fast_exp2(std::vector<float>(all.begin(), all.begin() + static_cast<long>(n)));
    ASSERT_EQ(part.size(), n);
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(part[i], whole[i]) << "length " << n << ", element " << i;
  }
}

TEST(Ch04FastExp2, rejects_nan_and_arguments_that_overflow_naming_x) {
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), 128.0f, std::numeric_limits<float>::infinity()}) {
    const std::vector<float> x = {0.0f, bad};
    try {
      (void)opt::fast_exp2(x);
      ADD_FAILURE() << "no error for " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("x[1]"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tvlab::ch04
