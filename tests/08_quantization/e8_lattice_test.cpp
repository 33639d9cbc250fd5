// Chapter 08, the E8 lattice quantizer: the fast nearest point is the nearest (against a search of
// every candidate around y), the codebook's size follows from E8's theta series, and after the
// randomized Hadamard rotation it codes weights with less error than the best uniform 2-bit grid,
// with fewer bits.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "../common/testing.hpp"
#include "tvlab/analysis/e8_lattice.hpp"
#include "tvlab/analysis/incoherence.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::analysis {
namespace {

using tvlab::testing::throws_error_naming;

double distance_sq(const Vec8& a, const Vec8& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < 8; ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
  return s;
}

// E8's points near y, by brute force: every integer vector within one of floor(y) with an even sum,
// and every half-integer vector (p - 1/2 integer with an even sum) within one of floor(y - 1/2) + 1/2.
double nearest_by_search(const Vec8& y) {
  double best = INFINITY;
  for (int coset = 0; coset < 2; ++coset) {
    const double shift = coset * 0.5;
    for (int code = 0; code < 6561; ++code) {  // 3^8 choices of {-1, 0, +1} offsets
      Vec8 p;
      long long sum = 0;
      int c = code;
      for (std::size_t i = 0; i < 8; ++i, c /= 3) {
        const double base = std::round(y[i] - shift) + (c % 3 - 1);
        sum += static_cast<long long>(base);
        p[i] = base + shift;
      }
      if (sum % 2 == 0) best = std::min(best, distance_sq(y, p));
    }
  }
  return best;
}

TEST(Ch08E8, the_fast_nearest_point_is_the_nearest) {
  Rng rng(880);
  for (int trial = 0; trial < 200; ++trial) {
    Vec8 y;
    for (double& v : y) v = 3.0 * rng.normal();
    const Vec8 p = nearest_e8(y);
    // p is in E8: all integers with an even sum, or all half-integers whose p - 1/2 has an even sum
    const bool half = std::fabs(p[0] - std::floor(p[0]) - 0.5) < 1e-12;
    long long sum = 0;
    for (double x : p) {
      EXPECT_NEAR(x - (half ? 0.5 : 0.0), std::round(x - (half ? 0.5 : 0.0)), 1e-12);
      sum += std::llround(x - (half ? 0.5 : 0.0));
    }
    EXPECT_EQ(sum % 2, 0);
    EXPECT_NEAR(distance_sq(y, p), nearest_by_search(y), 1e-12) << "trial " << trial;
  }
}

// The points of norm <= 10, counted by enumeration, against the theta series of E8: 1 point of norm
// 0 and 240 sigma_3(k) of norm 2k (sigma_3 the sum of the cubes of the divisors).
TEST(Ch08E8, the_codebook_has_the_theta_series_count) {
  long long enumerated = 0;
  for (int coset = 0; coset < 2; ++coset) {
    const double shift = coset * 0.5;
    const int lo = coset ? -4 : -3, hi = 3;  // |coordinate| <= sqrt(10) < 3.2
    std::array<int, 8> z;
    z.fill(lo);
    while (true) {
      double n = 0.0;
      long long sum = 0;
      for (int v : z) n += (v + shift) * (v + shift), sum += v;
      if (n <= kE8CodebookNormSq + 1e-9 && sum % 2 == 0) ++enumerated;
      std::size_t i = 0;
      while (i < 8 && ++z[i] > hi) z[i++] = lo;
      if (i == 8) break;
    }
  }
  long long theta = 1;
  for (int k = 1; 2 * k <= 10; ++k) {
    long long sigma3 = 0;
    for (int d = 1; d <= k; ++d)
      if (k % d == 0) sigma3 += static_cast<long long>(d) * d * d;
    theta += 240 * sigma3;
  }
  EXPECT_EQ(enumerated, theta);
  EXPECT_EQ(theta, 56881);
  EXPECT_LT(std::log2(double(theta)) / 8.0, 2.0) << "bits per weight";
}

// After the rotation, E8 (1.97 bits per weight) beats the best uniform 2-bit grid (2 bits).
TEST(Ch08E8, rotated_weights_code_better_on_the_lattice) {
  Rng rng(871);
  DTensor2 w = DTensor2::from_shape({128, 256});
  for (auto& v : w) v = rng.normal() * (rng.uniform() < 0.005 ? 10.0 : 1.0);
  const DTensor2 r = incoherent_rotation(w, 7, false);
  auto relative = [&](const DTensor2& approx) {
    double e = 0.0, n = 0.0;
    for (std::size_t i = 0; i < w.size(); ++i) e += std::pow(w.data()[i] - approx.data()[i], 2), n += w.data()[i] * w.data()[i];
    return std::sqrt(e / n);
  };
  const double uniform = relative(incoherent_rotation(uniform_2bit_rows(r), 7, true));
  const double lattice = relative(incoherent_rotation(e8_quantize_rows(r), 7, true));
  EXPECT_LT(lattice, 0.95 * uniform) << "uniform 2-bit " << uniform << ", E8 " << lattice;
  EXPECT_LT(uniform, relative(uniform_2bit_rows(w))) << "the rotation helps the uniform grid too";
}

TEST(Ch08E8, bad_input_is_named) {
  const DTensor2 w = xt::ones<double>({2, 12});
  EXPECT_TRUE(throws_error_naming([&] { e8_quantize_rows(w); }, {"e8_quantize_rows", "row length (12)", "multiple of 8"}));
  DTensor2 bad = xt::ones<double>({2, 8});
  bad(0, 3) = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { uniform_2bit_rows(bad); }, {"uniform_2bit_rows", "not finite"}));
}

}  // namespace
}  // namespace tvlab::analysis
