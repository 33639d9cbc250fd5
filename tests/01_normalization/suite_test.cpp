// Chapter 01 suites, run over every implementation in the registry (ref, opt, cuda — or student):
// equivalence with double oracles, backward vs finite differences, properties, bad input.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "oracle.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/normalization.hpp"

namespace tvlab::ch01 {
namespace {

using tvlab::testing::Context;
using tvlab::testing::matches;
using tvlab::testing::reduction_rtol;
using tvlab::testing::throws_error_naming;
using tvlab::testing::ImplName;
using tvlab::testing::under_test;

struct NormCase {
  const char* label;
  std::size_t rows, cols;
  double offset, scale;  // x ~ offset + scale * N(0, 1)
};

void PrintTo(const NormCase& c, std::ostream* out) { *out << c.label; }

const NormCase kNormCases[] = {
    {"one element", 1, 1, 0.0, 1.0},
    {"odd width", 3, 7, 0.0, 1.0},
    {"width 129 with outliers", 5, 129, 0.0, 3.0},
    {"large mean offset (LayerNorm is ill-conditioned here)", 4, 257, 100.0, 1.0},
    {"tiny values where eps matters", 3, 64, 0.0, 1e-3},
    {"many rows", 33, 512, 0.5, 2.0},  // finite differences cost rows x cols^2: wide enough for every SIMD path
};

struct NormData {
  Tensor2 x, dy;
  Tensor1 gamma, beta;
  unsigned long long seed;
};

NormData make_norm_data(const NormCase& c) {
  NormData d;
  d.seed = 100 + c.rows * 7 + c.cols;
  Rng rng(d.seed);
  d.x = rng.normal_matrix(c.rows, c.cols, c.offset, c.scale);
  for (std::size_t t = 0; t < c.rows; ++t) d.x(t, (5 * t) % c.cols) += static_cast<float>(6 * c.scale);  // outlier
  d.gamma = rng.normal_vector(c.cols, 1.0, 0.3);
  d.beta = rng.normal_vector(c.cols, 0.0, 0.3);
  d.dy = rng.normal_matrix(c.rows, c.cols);
  return d;
}

// Float error of a row normalisation: the reductions carry ~eps sqrt(d) relative error, amplified
// by the row's condition number max|x| / sigma (for LayerNorm with a large mean, x - mu cancels).
// atol = 10 eps sqrt(d) (1 + cond) max|gamma| (+ |beta| eps), rtol = reduction_rtol(d).
double norm_condition(const Tensor2& x, bool centred) {
  double worst = 0.0;
  for (std::size_t t = 0; t < x.shape()[0]; ++t) {
    double mean = 0.0, ms = 0.0, mx = 0.0;
    const std::size_t d = x.shape()[1];
    if (centred)
      for (std::size_t j = 0; j < d; ++j) mean += x(t, j) / static_cast<double>(d);
    for (std::size_t j = 0; j < d; ++j) {
      ms += (x(t, j) - mean) * (x(t, j) - mean) / static_cast<double>(d);
      mx = std::max(mx, std::fabs(static_cast<double>(x(t, j))));
    }
    worst = std::max(worst, ms > 0 ? mx / std::sqrt(ms) : 1.0);
  }
  return worst;
}

tvlab::Tolerance norm_tolerance(const NormData& d, bool centred, double extra = 1.0) {
  const double rtol = reduction_rtol(d.x.shape()[1]);
  const double gmax = xt::amax(xt::abs(d.gamma))();
  return {extra * rtol * (1.0 + norm_condition(d.x, centred)) * gmax + 1e-6, rtol};
}

std::string explore_command(const Backend& impl, const NormData& d, const NormCase& c) {
  return "tvlab 01_normalization --seed " + std::to_string(d.seed) + " --tokens " + std::to_string(c.rows) +
         " --d-model " + std::to_string(c.cols) + " --backend " + impl.name;
}

class LayerNormCases : public ::testing::TestWithParam<std::tuple<Backend, NormCase>> {};

// The worst row's RMS, in double: what a student can print from their own code to compare.
std::string rms_hint_at(const NormData& d, const std::vector<std::size_t>& at, double eps) {
  const std::size_t t = at[0], n = d.x.shape()[1];
  double ms = 0.0;
  for (std::size_t k = 0; k < n; ++k) ms += static_cast<double>(d.x(t, k)) * d.x(t, k) / static_cast<double>(n);
  std::ostringstream out;
  out << "row t = " << t << ": $\\tfrac1d \\sum_k x_{tk}^2$ = " << ms << ", $r_t$ = " << std::sqrt(ms + eps);
  if (at.size() > 1) out << "; column j = " << at[1] << ": x = " << d.x(t, at[1]) << ", gamma = " << d.gamma(at[1]);
  return out.str();
}
class RmsNormCases : public ::testing::TestWithParam<std::tuple<Backend, NormCase>> {};

TEST_P(LayerNormCases, forward_matches_oracle) {
  const auto& [impl, c] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  const NormData d = make_norm_data(c);
  const DTensor1 beta = to_double(d.beta);
  const DTensor2 expected = norm_oracle(to_double(d.x), to_double(d.gamma), &beta, 1e-5);
  EXPECT_TRUE(matches(impl.layer_norm(d.x, d.gamma, d.beta, 1e-5), expected, norm_tolerance(d, true),
                      {std::string("layer_norm, ") + c.label, {"t", "j"}, d.seed, explore_command(impl, d, c),
                       "variance is the mean of (x - mu)^2 over the row (divide by d, not d - 1), eps inside the sqrt"}));
}

TEST_P(RmsNormCases, forward_matches_oracle) {
  const auto& [impl, c] = GetParam();
  TVLAB_EXERCISE(impl, "01.1");
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  const NormData d = make_norm_data(c);
  const DTensor2 expected = norm_oracle(to_double(d.x), to_double(d.gamma), nullptr, 1e-6);
  EXPECT_TRUE(matches(impl.rms_norm(d.x, d.gamma, 1e-6), expected, norm_tolerance(d, false),
                      {std::string("rms_norm, ") + c.label + ", eps 1e-6", {"t", "j"}, d.seed, explore_command(impl, d, c),
                       "$y_{tj} = \\gamma_j\\,x_{tj} / r_t$ with $r_t = \\sqrt{\\tfrac1d \\sum_k x_{tk}^2 + \\epsilon}$: "
                       "no mean subtraction, $\\epsilon$ inside the square root, the sum in double",
                       [&d](const std::vector<std::size_t>& at) { return rms_hint_at(d, at, 1e-6); }}));
}

// Backward tolerance: dx = (g - mean(g) - xhat mean(g xhat)) / sigma; the same conditioning as the
// forward, times max|gamma dy| / sigma. dgamma/dbeta sum over rows: rtol grows with sqrt(rows).
tvlab::Tolerance dx_tolerance(const NormData& d, bool centred, double eps) {
  double inv_sigma = 0.0;
  for (std::size_t t = 0; t < d.x.shape()[0]; ++t) {
    double mean = 0.0, ms = 0.0;
    const std::size_t n = d.x.shape()[1];
    if (centred)
      for (std::size_t j = 0; j < n; ++j) mean += d.x(t, j) / static_cast<double>(n);
    for (std::size_t j = 0; j < n; ++j) ms += (d.x(t, j) - mean) * (d.x(t, j) - mean) / static_cast<double>(n);
    inv_sigma = std::max(inv_sigma, 1.0 / std::sqrt(ms + eps));
  }
  const double gdy = xt::amax(xt::abs(d.gamma))() * xt::amax(xt::abs(d.dy))();
  const double rtol = reduction_rtol(d.x.shape()[1]);
  return {rtol * (1.0 + norm_condition(d.x, centred)) * gdy * inv_sigma * 4 + 1e-6, 4 * rtol};
}

tvlab::Tolerance param_grad_tolerance(const NormData& d, bool centred) {
  const double rows = static_cast<double>(d.x.shape()[0]);
  const double rtol = reduction_rtol(d.x.shape()[0]) + reduction_rtol(d.x.shape()[1]);
  return {rtol * rows * xt::amax(xt::abs(d.dy))() * (1.0 + norm_condition(d.x, centred)) + 1e-6, rtol};
}

TEST_P(LayerNormCases, backward_matches_finite_differences) {
  const auto& [impl, c] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  const NormData d = make_norm_data(c);
  const LayerNormGrads g = impl.layer_norm_backward(d.x, d.gamma, d.dy, 1e-5);
  const NumericGrads fd = norm_finite_differences(d.x, d.gamma, &d.beta, d.dy, 1e-5);
  const std::string what = std::string("layer_norm_backward, ") + c.label;
  EXPECT_TRUE(matches(g.dx, fd.dx, dx_tolerance(d, true, 1e-5), {what + ": dx", {"t", "j"}, d.seed, explore_command(impl, d, c),
                      "dx = (g - mean(g) - xhat * mean(g * xhat)) / sigma with g = gamma * dy"}));
  EXPECT_TRUE(matches(g.dgamma, fd.dgamma, param_grad_tolerance(d, true), {what + ": dgamma", {"j"}, d.seed, "",
                      "dgamma sums dy * xhat over all rows"}));
  EXPECT_TRUE(matches(g.dbeta, fd.dbeta, param_grad_tolerance(d, true), {what + ": dbeta", {"j"}, d.seed, "",
                      "dbeta sums dy over all rows"}));
}

TEST_P(RmsNormCases, backward_matches_finite_differences) {
  const auto& [impl, c] = GetParam();
  TVLAB_EXERCISE(impl, "01.2");
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  const NormData d = make_norm_data(c);
  const RmsNormGrads g = impl.rms_norm_backward(d.x, d.gamma, d.dy, 1e-6);
  const NumericGrads fd = norm_finite_differences(d.x, d.gamma, nullptr, d.dy, 1e-6);
  const std::string what = std::string("rms_norm_backward, ") + c.label;
  EXPECT_TRUE(matches(g.dx, fd.dx, dx_tolerance(d, false, 1e-6),
                      {what + ": dx against central finite differences of the loss sum(dy * y)", {"t", "j"}, d.seed,
                       explore_command(impl, d, c),
                       "$dx_{tj} = (\\gamma_j\\,dy_{tj} - \\hat x_{tj}\\,\\tfrac1d \\sum_k \\gamma_k\\,dy_{tk}\\,"
                       "\\hat x_{tk}) / r_t$ with $\\hat x = x / r_t$, $r_t = \\sqrt{\\tfrac1d \\sum_k x_{tk}^2 + "
                       "\\epsilon}$: the second term is the path through $r_t$, which every $x_{tk}$ of the row changes",
                       [&d](const std::vector<std::size_t>& at) { return rms_hint_at(d, at, 1e-6); }}));
  EXPECT_TRUE(matches(g.dgamma, fd.dgamma, param_grad_tolerance(d, false),
                      {what + ": dgamma against central finite differences", {"j"}, d.seed, "",
                       "$d\\gamma_j = \\sum_t dy_{tj}\\,x_{tj} / r_t$, summed over every row t (" +
                           std::to_string(c.rows) + " rows here)"}));
}

INSTANTIATE_TEST_SUITE_P(Ch01, LayerNormCases,
                         ::testing::Combine(::testing::ValuesIn(under_test(backends(), &Backend::layer_norm)),
                                            ::testing::ValuesIn(kNormCases)),
                         tvlab::testing::ImplCaseName());
INSTANTIATE_TEST_SUITE_P(Ch01, RmsNormCases,
                         ::testing::Combine(::testing::ValuesIn(under_test(backends(), &Backend::rms_norm)),
                                            ::testing::ValuesIn(kNormCases)),
                         tvlab::testing::ImplCaseName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(LayerNormCases);

// -------------------------------------------------------------------------------------- properties

class LayerNorm : public ::testing::TestWithParam<Backend> {};
class RmsNorm : public ::testing::TestWithParam<Backend> {};

TEST_P(RmsNorm, rms_of_the_output_is_below_one_by_eps) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "01.1");
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  // With gamma = 1, RMS(y) = sqrt(ms / (ms + eps)) exactly — 1 only when ms >> eps.
  const Tensor2 x = {{1e-3f, -2e-3f, 3e-3f, 5e-4f}};
  const Tensor1 gamma = xt::ones<float>({4});
  const double eps = 1e-5;
  const Tensor2 y = impl.rms_norm(x, gamma, eps);
  double ms = 0.0, ms_y = 0.0;
  for (std::size_t j = 0; j < 4; ++j) {
    ms += static_cast<double>(x(0, j)) * x(0, j) / 4;
    ms_y += static_cast<double>(y(0, j)) * y(0, j) / 4;
  }
  EXPECT_NEAR(std::sqrt(ms_y), std::sqrt(ms / (ms + eps)), 1e-6)
      << "rms_norm of one row with |x| ~ 1e-3, gamma 1, eps 1e-5: RMS(y) = $\\sqrt{ms / (ms + \\epsilon)}$ with "
      << "ms = $\\tfrac1d \\sum x^2$ = " << ms << ": $\\epsilon$ goes inside the square root";
  EXPECT_LT(std::sqrt(ms_y), 0.6) << "rms_norm of a row with |x| ~ 1e-3, eps 1e-5: eps dominates the mean square, so "
                                     "the output stays small (RMS(y) = " << std::sqrt(ms_y) << ")";
}

TEST_P(LayerNorm, equals_rms_norm_on_zero_mean_rows) {
  const Backend& impl = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  Rng rng(21);
  Tensor2 x = Tensor2::from_shape({3, 16});
  for (std::size_t t = 0; t < 3; ++t)
    for (std::size_t j = 0; j < 8; ++j) x(t, j + 8) = -(x(t, j) = static_cast<float>(rng.normal()));  // mean exactly 0
  const Tensor1 gamma = rng.normal_vector(16), beta = xt::zeros<float>({16});
  const Tensor2 a = impl.layer_norm(x, gamma, beta, 1e-5), b = impl.rms_norm(x, gamma, 1e-5);
  EXPECT_TRUE(matches(a, xt::eval(xt::cast<double>(b)), {1e-6, 1e-5},
                      {"layer_norm vs rms_norm on zero-mean rows", {"t", "j"}, 21, "", ""}));
}

TEST_P(LayerNorm, ignores_a_shift_of_the_row) {
  const Backend& impl = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  const Tensor2 x = {{1, 2, 3, 4, 6}, {-1, 0, 5, 2, 2}};
  const Tensor1 gamma = xt::ones<float>({5}), beta = xt::zeros<float>({5});
  const Tensor2 shifted = x + 64.0f;  // exact in float for these integers
  // Mathematically equal; in float the row mean of x + 64 (about 67) is rounded, an error of
  // ~eps * 67 that the division by sigma (~1.7) turns into ~5e-6: atol 2e-5.
  EXPECT_TRUE(matches(impl.layer_norm(shifted, gamma, beta, 1e-5),
                      xt::eval(xt::cast<double>(impl.layer_norm(x, gamma, beta, 1e-5))), {2e-5, 1e-6},
                      {"layer_norm(x + 64) vs layer_norm(x)", {"t", "j"}, 0, "", "subtract the mean"}));
}

TEST_P(LayerNorm, keeps_float_accuracy_when_the_mean_dwarfs_the_spread) {
  const Backend& impl = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  // Rows with mean +30, -30 and +1000 and unit spread, 1024 wide (every SIMD path, a tail-free width).
  constexpr std::size_t rows = 3, d = 1024;
  const double means[rows] = {30.0, -30.0, 1000.0};
  Rng rng(31);
  Tensor2 x = rng.normal_matrix(rows, d);
  for (std::size_t t = 0; t < rows; ++t)
    for (std::size_t j = 0; j < d; ++j) x(t, j) += static_cast<float>(means[t]);
  const Tensor1 gamma = rng.normal_vector(d, 1.0, 0.3), beta = rng.normal_vector(d, 0.0, 0.3);
  const DTensor1 beta_d = to_double(beta);
  const DTensor2 expected = norm_oracle(to_double(x), to_double(gamma), &beta_d, 1e-5);
  const Tensor2 y = impl.layer_norm(x, gamma, beta, 1e-5);
  // The float32 error of the two-pass formula (mean, then the mean of (x - mu)^2) when x - mu is
  // formed without rounding at the scale of |mu|: the inputs are exact floats, so each centred
  // value carries a few roundings of its own size and of sigma's (the shift and the offset), rstd
  // a few relative roundings, gamma * xhat + beta one each. With u = 2^-24:
  //   |y_j - y*_j| <= 8u (|gamma_j| (|xhat_j| + 1) + |beta_j|).
  // A mean rounded to float, or summed in float from values of size |mu|, moves every x_j - mu by
  // about u |mu| sqrt(d / lanes): 30 to 1000 times sigma's share, far beyond this bound.
  const double u = std::ldexp(1.0, -24);
  double worst = 0.0;
  std::size_t worst_t = 0, worst_j = 0;
  for (std::size_t t = 0; t < rows; ++t) {
    double mean = 0.0, var = 0.0;
    for (std::size_t j = 0; j < d; ++j) mean += static_cast<double>(x(t, j)) / d;
    for (std::size_t j = 0; j < d; ++j) var += (x(t, j) - mean) * (x(t, j) - mean) / d;
    for (std::size_t j = 0; j < d; ++j) {
      const double xhat = (x(t, j) - mean) / std::sqrt(var + 1e-5);
      const double bound = 8 * u * (std::fabs(gamma(j)) * (std::fabs(xhat) + 1) + std::fabs(beta(j)));
      const double ratio = std::fabs(y(t, j) - expected(t, j)) / bound;
      if (!(ratio <= worst)) {
        worst = ratio;
        worst_t = t;
        worst_j = j;
      }
    }
  }
  EXPECT_LE(worst, 1.0) << "layer_norm on rows with mean " << means[worst_t]
                        << " and unit spread: the worst element (t, j) = (" << worst_t << ", " << worst_j
                        << ") is off by " << std::fabs(y(worst_t, worst_j) - expected(worst_t, worst_j)) << ", "
                        << worst << " times the bound 8u (|gamma| (|xhat| + 1) + |beta|). Hint: a plain float sum "
                        << "of the row carries errors of size u |mean|; sum x - x_0 instead, and centre as "
                        << "(x - x_0) - offset (seed 31, " << impl.name << ")";
}

TEST_P(RmsNorm, ignores_a_scale_of_the_row_when_eps_is_zero) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "01.1");
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  const Tensor2 x = {{1, 2, 3, 4, 6}, {-1, 0, 5, 2, 2}};
  const Tensor1 gamma = xt::ones<float>({5});
  const Tensor2 scaled = x * 4.0f;  // a power of two: exact, and so is every step after it
  EXPECT_TRUE(matches(impl.rms_norm(scaled, gamma, 0.0), xt::eval(xt::cast<double>(impl.rms_norm(x, gamma, 0.0))),
                      {1e-6, 1e-6}, {"rms_norm(4x) vs rms_norm(x), eps = 0, 2 rows of 5", {"t", "j"}, 0, "",
                                     "with $\\epsilon = 0$, $4x / r(4x) = x / r(x)$: RMSNorm must not depend on the row's scale"}));
}

// |x| ~ 1e20: squares overflow float (max 3.4e38), yet the normalised row is well defined.
Tensor2 huge_rows() {
  Rng rng(23);
  Tensor2 x = rng.normal_matrix(3, 37);
  x *= 1e20f;
  return x;
}

TEST_P(LayerNorm, handles_values_whose_squares_overflow_float) {
  const Backend& impl = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  const Tensor2 x = huge_rows();
  const Tensor1 gamma = xt::ones<float>({37}), beta = xt::zeros<float>({37});
  const DTensor1 beta_d = to_double(beta);
  EXPECT_TRUE(matches(impl.layer_norm(x, gamma, beta, 1e-5), norm_oracle(to_double(x), to_double(gamma), &beta_d, 1e-5),
                      {1e-5, reduction_rtol(37)},
                      {"layer_norm of rows with |x| ~ 1e20", {"t", "j"}, 23, "",
                       "$x^2 \\approx 10^{40}$ overflows float (max 3.4e38): square and sum in double"}));
}

TEST_P(RmsNorm, handles_values_whose_squares_overflow_float) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "01.1");
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  const Tensor2 x = huge_rows();
  const Tensor1 gamma = xt::ones<float>({37});
  EXPECT_TRUE(matches(impl.rms_norm(x, gamma, 1e-6), norm_oracle(to_double(x), to_double(gamma), nullptr, 1e-6),
                      {1e-5, reduction_rtol(37)},
                      {"rms_norm of rows with |x| ~ 1e20", {"t", "j"}, 23, "",
                       "$x^2 \\approx 10^{40}$ overflows float (max 3.4e38): square and sum in double"}));
}

// The backward on the same hostile rows, against the double-precision reference (itself checked
// against finite differences on ordinary rows above).
TEST_P(LayerNorm, backward_handles_values_whose_squares_overflow_float) {
  const Backend& impl = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  const Tensor2 x = huge_rows();
  Rng rng(24);
  const Tensor2 dy = rng.normal_matrix(3, 37);
  const Tensor1 gamma = rng.normal_vector(37, 1, 0.2);
  const LayerNormGrads got = impl.layer_norm_backward(x, gamma, dy, 1e-5);
  const LayerNormGrads want = ref::layer_norm_backward(x, gamma, dy, 1e-5);
  // dx ~ dy / sigma ~ 1e-20: compare relative to that scale; dgamma, dbeta are O(1) sums of 3 rows.
  const double dx_scale = xt::amax(xt::abs(want.dx))();
  EXPECT_TRUE(matches(got.dx, xt::eval(xt::cast<double>(want.dx)), {reduction_rtol(37) * dx_scale * 10, reduction_rtol(37)},
                      {"layer_norm_backward dx, |x| ~ 1e20", {"t", "j"}, 24, "", "accumulate the row statistics in double"}));
  EXPECT_TRUE(matches(got.dgamma, xt::eval(xt::cast<double>(want.dgamma)), {1e-5, reduction_rtol(37)},
                      {"layer_norm_backward dgamma, |x| ~ 1e20", {"j"}, 24, "", ""}));
}

TEST_P(RmsNorm, backward_handles_values_whose_squares_overflow_or_underflow_float) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "01.2");
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  Rng rng(25);
  const Tensor2 dy = rng.normal_matrix(3, 37);
  const Tensor1 gamma = rng.normal_vector(37, 1, 0.2);
  for (const float magnitude : {1e20f, 1e-23f}) {  // squares overflow float / are subnormal
    Tensor2 x = huge_rows() / 1e20f;
    x *= magnitude;
    const RmsNormGrads got = impl.rms_norm_backward(x, gamma, dy, 0.0);
    const RmsNormGrads want = ref::rms_norm_backward(x, gamma, dy, 0.0);
    const double dx_scale = xt::amax(xt::abs(want.dx))();
    const std::string what = "rms_norm_backward, eps = 0, |x| ~ " + std::to_string(magnitude);
    EXPECT_TRUE(matches(got.dx, xt::eval(xt::cast<double>(want.dx)), {reduction_rtol(37) * dx_scale * 10, reduction_rtol(37)},
                        {what + ": dx, against tvlab::ref", {"t", "j"}, 25, "",
                         "$x^2$ overflows float at 1e20 and is subnormal at 1e-23: square and sum in double"}));
    EXPECT_TRUE(matches(got.dgamma, xt::eval(xt::cast<double>(want.dgamma)), {1e-5, reduction_rtol(37)},
                        {what + ": dgamma, against tvlab::ref", {"j"}, 25, "",
                         "$d\\gamma_j = \\sum_t dy_{tj}\\,x_{tj} / r_t$ with $r_t$ from a double sum of squares"}));
  }
}

TEST_P(RmsNorm, forward_handles_subnormal_squares) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "01.1");
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  // |x| ~ 1e-23: x^2 ~ 1e-46 is below float's smallest normal (1.2e-38); with eps = 0 the
  // output is still O(1) and well defined.
  const Tensor2 x = {{1e-23f, 3e-23f, -2e-23f}};
  const Tensor1 gamma = xt::ones<float>({3});
  EXPECT_TRUE(matches(impl.rms_norm(x, gamma, 0.0), norm_oracle(to_double(x), to_double(gamma), nullptr, 0.0),
                      {1e-6, 1e-6}, {"rms_norm of a row with subnormal squares, eps = 0", {"t", "j"}, 0, "",
                                     "square in double: float squares of 1e-23 are subnormal or zero"}));
}

TEST_P(LayerNorm, rejects_bad_input_naming_the_parameter) {
  const Backend& impl = GetParam();
  const Tensor2 x = xt::ones<float>({2, 4});
  const Tensor1 g4 = xt::ones<float>({4}), g3 = xt::ones<float>({3});
  EXPECT_TRUE(throws_error_naming([&] { impl.layer_norm(x, g3, g4, 1e-5); }, {"layer_norm", "gamma"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.layer_norm(x, g4, g3, 1e-5); }, {"layer_norm", "beta"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.layer_norm(x, g4, g4, -1.0); }, {"layer_norm", "eps"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.layer_norm(Tensor2(xt::ones<float>({0, 4})), g4, g4, 1e-5); },
                                  {"layer_norm", "x", "empty"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.layer_norm_backward(x, g4, Tensor2(xt::ones<float>({3, 4})), 1e-5); },
                                  {"layer_norm_backward", "dy"}));
  // eps = 0 and a constant row: (x - mu) / sqrt(0) is 0/0.
  EXPECT_TRUE(throws_error_naming([&] { impl.layer_norm(x, g4, g4, 0.0); }, {"layer_norm", "eps", "zero variance"}));
  Tensor2 bad = x;
  bad(1, 3) = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws_error_naming([&] { impl.layer_norm(bad, g4, g4, 1e-5); }, {"layer_norm", "x", "non-finite"}));
}

TEST_P(RmsNorm, rejects_bad_input_naming_the_parameter) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "01.1, 01.2");
  const Tensor2 x = xt::ones<float>({2, 4});
  const Tensor1 g4 = xt::ones<float>({4}), g3 = xt::ones<float>({3});
  Tensor2 bad = x;
  bad(1, 1) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { impl.rms_norm(bad, g4, 1e-6); }, {"rms_norm", "x", "non-finite"}))
      << "exercise 01.1: rms_norm of x [2, 4] with NaN at (1, 1)";
  EXPECT_TRUE(throws_error_naming([&] { impl.rms_norm(x, g3, 1e-6); }, {"rms_norm", "gamma"}))
      << "exercise 01.1: rms_norm of x [2, 4] with gamma [3]";
  EXPECT_TRUE(throws_error_naming([&] { impl.rms_norm(x, g4, std::numeric_limits<double>::infinity()); },
                                  {"rms_norm", "eps"}))
      << "exercise 01.1: rms_norm with eps = inf";
  EXPECT_TRUE(throws_error_naming([&] { impl.rms_norm_backward(x, g4, Tensor2(xt::ones<float>({2, 3})), 1e-6); },
                                  {"rms_norm_backward", "dy"}))
      << "exercise 01.2: rms_norm_backward of x [2, 4] with dy [2, 3]";
  const Tensor2 zero_row = {{1, 2, 3, 4}, {0, 0, 0, 0}};
  EXPECT_TRUE(throws_error_naming([&] { impl.rms_norm(zero_row, g4, 0.0); }, {"rms_norm", "eps", "zero mean square"}))
      << "exercise 01.1: rms_norm with eps 0 and an all-zero row: $x / r$ is 0/0";
  EXPECT_TRUE(throws_error_naming([&] { impl.rms_norm_backward(zero_row, g4, zero_row, 0.0); },
                                  {"rms_norm_backward", "eps"}))
      << "exercise 01.2: rms_norm_backward with eps 0 and an all-zero row";
}

INSTANTIATE_TEST_SUITE_P(Ch01, LayerNorm, ::testing::ValuesIn(under_test(backends(), &Backend::layer_norm)), ImplName());
INSTANTIATE_TEST_SUITE_P(Ch01, RmsNorm, ::testing::ValuesIn(under_test(backends(), &Backend::rms_norm)), ImplName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(LayerNorm);

// -------------------------------------------------------------------------------------- activations

class Activations : public ::testing::TestWithParam<Backend> {};

Tensor2 activation_inputs() {
  // A grid over [-20, 20] plus random values, as one [8, 133] matrix (133: not a SIMD multiple).
  Tensor2 x = Tensor2::from_shape({8, 133});
  Rng rng(31);
  for (std::size_t i = 0; i < x.size(); ++i)
    x.data()[i] = i < 401 ? static_cast<float>(-20.0 + 0.1 * static_cast<double>(i)) : static_cast<float>(3 * rng.normal());
  return x;
}

TEST_P(Activations, match_their_formulas) {
  const Backend& impl = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  const Tensor2 x = activation_inputs();
  // Elementwise float functions: a few ulp relative; near the zeros of 1 + erf or 1 + tanh the
  // float forms lose relative accuracy, so an absolute floor of |x| eps ~ 2e-6 on [-20, 20].
  const tvlab::Tolerance tol{2e-6, 8 * FLT_EPSILON};
  const auto ctx = [&](const char* name, const char* hint) {
    return Context{std::string(name) + " on [-20, 20]", {"i", "j"}, 31, "tvlab 01_normalization --backend " + impl.name, hint};
  };
  EXPECT_TRUE(matches(impl.relu(x), activation_oracle(x, [](double v) { return v > 0 ? v : 0.0; }), {0, 0},
                      ctx("relu", "max(0, x)")));
  EXPECT_TRUE(matches(impl.gelu(x), activation_oracle(x, gelu_exact), tol, ctx("gelu", "x * Phi(x) = x/2 (1 + erf(x / sqrt 2))")));
  EXPECT_TRUE(matches(impl.gelu_tanh(x), activation_oracle(x, gelu_tanh_formula), tol,
                      ctx("gelu_tanh", "sqrt(2/pi) = 0.7978845608, cubic coefficient 0.044715")));
  EXPECT_TRUE(matches(impl.silu(x), activation_oracle(x, silu_formula), tol, ctx("silu", "x * sigmoid(x)")));
}

TEST_P(Activations, tanh_gelu_is_close_to_exact_gelu_but_not_equal) {
  const Backend& impl = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  const Tensor2 x = activation_inputs();
  const double gap = xt::amax(xt::abs(impl.gelu(x) - impl.gelu_tanh(x)))();
  // Measured in double on a fine grid: max |gelu - gelu_tanh| = 4.73e-4 near x = -2.70.
  EXPECT_LT(gap, 5e-4);
  EXPECT_GT(gap, 1e-4);
}

TEST_P(Activations, reject_nan) {
  const Backend& impl = GetParam();
  Tensor2 x = xt::zeros<float>({1, 3});
  x(0, 1) = std::numeric_limits<float>::quiet_NaN();
  for (const auto& [name, f] : {std::pair{"relu", impl.relu}, {"gelu", impl.gelu}, {"gelu_tanh", impl.gelu_tanh}, {"silu", impl.silu}})
    EXPECT_TRUE(throws_error_naming([&] { f(x); }, {name, "x"}));
}

INSTANTIATE_TEST_SUITE_P(Ch01, Activations, ::testing::ValuesIn(under_test(backends(), &Backend::relu)), ImplName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Activations);

// ---------------------------------------------------------------------------------------------- FFN

class Ffn : public ::testing::TestWithParam<Backend> {};
class TwoLayerFfn : public ::testing::TestWithParam<Backend> {};

struct FfnCase {
  std::size_t tokens, d_model, d_ff;
  bool bias;
};
const FfnCase kFfnCases[] = {{1, 1, 1, false}, {3, 8, 32, true}, {7, 24, 64, false}, {17, 64, 171, true}};

FfnWeights make_ffn(Rng& rng, const FfnCase& c) {
  FfnWeights w{rng.normal_matrix(c.d_model, c.d_ff, 0, 1 / std::sqrt(c.d_model)), {},
               rng.normal_matrix(c.d_ff, c.d_model, 0, 1 / std::sqrt(c.d_ff)), {}};
  if (c.bias) {
    w.b1 = rng.normal_vector(c.d_ff, 0, 0.1);
    w.b2 = rng.normal_vector(c.d_model, 0, 0.1);
  }
  return w;
}

// Two chained reductions (length d_model, then d_ff): relative to the output's scale.
tvlab::Tolerance ffn_tolerance(const DTensor2& expected, const FfnCase& c) {
  const double rtol = reduction_rtol(c.d_model) + reduction_rtol(c.d_ff);
  return {2 * rtol * std::max(1.0, static_cast<double>(xt::amax(xt::abs(expected))())), 2 * rtol};
}

TEST_P(TwoLayerFfn, relu_and_gelu_ffn_match_oracle) {
  const Backend& impl = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  for (const FfnCase& c : kFfnCases) {
    const unsigned long long seed = 50 + c.d_ff;
    Rng rng(seed);
    const FfnWeights w = make_ffn(rng, c);
    const Tensor2 x = rng.normal_matrix(c.tokens, c.d_model);
    const DTensor2 relu_expected = ffn_oracle(x, w, [](double v) { return v > 0 ? v : 0.0; });
    const DTensor2 gelu_expected = ffn_oracle(x, w, gelu_exact);
    const std::string shape = " [" + std::to_string(c.tokens) + " x " + std::to_string(c.d_model) + "], d_ff " +
                              std::to_string(c.d_ff) + (c.bias ? ", biases" : "");
    EXPECT_TRUE(matches(impl.ffn_relu(x, w), relu_expected, ffn_tolerance(relu_expected, c),
                        {"ffn_relu" + shape, {"t", "c"}, seed, "", "ReLU(x W1 + b1) W2 + b2"}));
    EXPECT_TRUE(matches(impl.ffn_gelu(x, w), gelu_expected, ffn_tolerance(gelu_expected, c),
                        {"ffn_gelu" + shape, {"t", "c"}, seed, "", "GELU(x W1 + b1) W2 + b2, exact erf GELU"}));
  }
}

TEST_P(Ffn, swiglu_ffn_matches_oracle) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "01.3");
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  for (const FfnCase& c : kFfnCases) {
    const unsigned long long seed = 60 + c.d_ff;
    Rng rng(seed);
    const SwigluWeights w{rng.normal_matrix(c.d_model, c.d_ff, 0, 1 / std::sqrt(c.d_model)),
                          rng.normal_matrix(c.d_model, c.d_ff, 0, 1 / std::sqrt(c.d_model)),
                          rng.normal_matrix(c.d_ff, c.d_model, 0, 1 / std::sqrt(c.d_ff))};
    const Tensor2 x = rng.normal_matrix(c.tokens, c.d_model);
    const DTensor2 expected = swiglu_oracle(x, w);
    EXPECT_TRUE(matches(impl.ffn_swiglu(x, w), expected, ffn_tolerance(expected, c),
                        {"ffn_swiglu [" + std::to_string(c.tokens) + " x " + std::to_string(c.d_model) + "], d_ff " +
                             std::to_string(c.d_ff),
                         {"t", "c"}, seed, "tvlab 01_normalization --backend " + impl.name,
                         "$y = (\\mathrm{Swish}(x W_1) \\odot x W_2)\\,W_3$ with $\\mathrm{Swish}(a) = a / (1 + e^{-a})$: "
                         "the Swish goes on the gate $x W_1$, not on $x W_2$"}));
  }
}

TEST_P(TwoLayerFfn, relu_ffn_without_bias_is_positively_homogeneous) {
  const Backend& impl = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  Rng rng(70);
  const FfnWeights w = make_ffn(rng, {5, 8, 32, false});
  const Tensor2 x = rng.normal_matrix(5, 8);
  const Tensor2 twice = x * 2.0f;
  // ReLU(2a) = 2 ReLU(a) and scaling by 2 is exact, so FFN(2x) = 2 FFN(x) up to summation order.
  EXPECT_TRUE(matches(impl.ffn_relu(twice, w), xt::eval(xt::cast<double>(impl.ffn_relu(x, w)) * 2.0), {1e-5, 1e-5},
                      {"ffn_relu(2x) vs 2 ffn_relu(x)", {"t", "c"}, 70, "", ""}));
}

TEST_P(Ffn, rejects_bad_input_naming_the_parameter) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "01.3");
  const Tensor2 x = xt::ones<float>({2, 4});
  const SwigluWeights sw{xt::ones<float>({4, 6}), xt::ones<float>({4, 5}), xt::ones<float>({6, 4})};
  EXPECT_TRUE(throws_error_naming([&] { impl.ffn_swiglu(x, sw); }, {"ffn_swiglu", "w2", "d_ff"}))
      << "w1 [4, 6] and w2 [4, 5]: different d_ff";
  const SwigluWeights sw3{xt::ones<float>({4, 6}), xt::ones<float>({4, 6}), xt::ones<float>({6, 3})};
  EXPECT_TRUE(throws_error_naming([&] { impl.ffn_swiglu(x, sw3); }, {"ffn_swiglu", "w3"}))
      << "x [2, 4] and w3 [6, 3]: w3 must give d_model = 4 columns";
  EXPECT_TRUE(throws_error_naming([&] { impl.ffn_swiglu(Tensor2(xt::ones<float>({2, 5})), SwigluWeights{sw.w1, sw.w1, sw.w3}); },
                                  {"ffn_swiglu", "w1"}))
      << "x [2, 5] and w1 [4, 6]: w1 must have d_model = 5 rows";
}

TEST_P(TwoLayerFfn, rejects_bad_input_naming_the_parameter) {
  const Backend& impl = GetParam();
  const Tensor2 x = xt::ones<float>({2, 4});
  const FfnWeights w{xt::ones<float>({4, 6}), xt::ones<float>({5}), xt::ones<float>({6, 4}), {}};
  EXPECT_TRUE(throws_error_naming([&] { impl.ffn_relu(x, w); }, {"ffn_relu", "b1"}));
  const FfnWeights w2{xt::ones<float>({4, 6}), {}, xt::ones<float>({5, 4}), {}};
  EXPECT_TRUE(throws_error_naming([&] { impl.ffn_gelu(x, w2); }, {"ffn_gelu", "w2"}));
}

INSTANTIATE_TEST_SUITE_P(Ch01, Ffn, ::testing::ValuesIn(under_test(backends(), &Backend::ffn_swiglu)), ImplName());
INSTANTIATE_TEST_SUITE_P(Ch01, TwoLayerFfn, ::testing::ValuesIn(under_test(backends(), &Backend::ffn_relu)), ImplName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TwoLayerFfn);

}  // namespace
}  // namespace tvlab::ch01
