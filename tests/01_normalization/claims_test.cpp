// Chapter 01: the documents' claims about normalization and activations, measured. The float32
// precision of LayerNorm and RMSNorm as a row's mean grows (000 L373, L379), and the zero-gradient
// fractions of ReLU, GELU and SiLU (000 L383). Expected values come from closed forms (Phi(-mu),
// Phi(-mu)^B), from an independent double oracle (oracle.hpp) and from rounding-error analysis.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>

#include "oracle.hpp"
#include "tvlab/analysis/dying_units.hpp"
#include "tvlab/analysis/norm_precision.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/opt/normalization.hpp"
#include "tvlab/ref/normalization.hpp"

namespace tvlab::analysis {
namespace {

constexpr double kU = 5.9604644775390625e-08;  // 2^-24, the unit roundoff of float
constexpr std::size_t kRows = 16, kDim = 1024;
constexpr double kEps = 1e-5;

Tensor2 rows_with_mean(double mean) {
  Rng rng(11);
  return rng.normal_matrix(kRows, kDim, mean, 1.0);
}

void expect_error_naming(const std::function<void()>& call, const std::string& parameter) {
  try {
    call();
    ADD_FAILURE() << "expected tvlab::Error naming " << parameter;
  } catch (const tvlab::Error& e) {
    EXPECT_NE(std::string(e.what()).find(parameter), std::string::npos) << e.what();
  }
}

TEST(Ch01Claims, the_exact_norms_match_the_independent_oracle) {
  const Tensor2 x = rows_with_mean(100);
  const DTensor1 ones = xt::ones<double>({kDim}), zeros = xt::zeros<double>({kDim});
  const DTensor2 ln = ch01::norm_oracle(ch01::to_double(x), ones, &zeros, kEps);
  const DTensor2 rms = ch01::norm_oracle(ch01::to_double(x), ones, nullptr, kEps);
  // Both in double: they differ by rounding, about 1e-16 times mean/spread (100) at most.
  EXPECT_LT(xt::amax(xt::abs(layer_norm_exact(x, kEps) - ln))(), 1e-11);
  EXPECT_LT(xt::amax(xt::abs(rms_norm_exact(x, kEps) - rms))(), 1e-13);
}

TEST(Ch01Claims, textbook_float_layer_norm_loses_digits_as_the_mean_grows) {
  // Summing 1024 values near 1e4 in float rounds a partial sum of up to 1e7 at every step (ulp 1):
  // the mean is off by about sqrt(d) x 0.3 / d ~ 1e-2, divided by the spread 1 and the output's
  // maximum ~3: ~3e-3. The bound asserted is 30 times smaller.
  const Tensor2 x = rows_with_mean(1e4);
  const double err = normwise_relative_error(layer_norm_float32(x, kEps), layer_norm_exact(x, kEps));
  EXPECT_GT(err, 1e-4) << "the textbook float LayerNorm at mean/spread 1e4";
  // At mean 0 the same loops are accurate: rounding of sums of length d, 10 sqrt(d) u.
  const Tensor2 centred = rows_with_mean(0);
  EXPECT_LT(normwise_relative_error(layer_norm_float32(centred, kEps), layer_norm_exact(centred, kEps)),
            10 * std::sqrt(static_cast<double>(kDim)) * kU);
}

TEST(Ch01Claims, textbook_float_rms_norm_is_accurate_relative_to_its_output_at_every_mean) {
  // A sum of d positive terms in float has a relative error of about sqrt(d) u (at most d u); the
  // division adds u. Relative to the output's size the error does not depend on the mean.
  for (double mean : {0.0, 1.0, 100.0, 1e4}) {
    const Tensor2 x = rows_with_mean(mean);
    EXPECT_LT(normwise_relative_error(rms_norm_float32(x, kEps), rms_norm_exact(x, kEps)),
              10 * std::sqrt(static_cast<double>(kDim)) * kU)
        << "mean " << mean;
  }
}

TEST(Ch01Claims, rms_norm_output_at_a_large_mean_carries_the_features_in_its_last_bits) {
  // At mean 1e4 the output is 1 + (x_j - mean)/r: its spread is 1e-4, and rounding the output to
  // float (half an ulp of 1, 6e-8) is already 6e-4 of that spread at the worst element.
  const Tensor2 x = rows_with_mean(1e4);
  EXPECT_GT(spread_relative_error(rms_norm_float32(x, kEps), rms_norm_exact(x, kEps)), 1e-4);
}

TEST(Ch01Claims, the_chapters_layer_norms_are_as_accurate_as_rms_norm_at_every_mean) {
  // ref accumulates in double and rounds once: within a few u. opt shifts its float sums by the
  // row's first value (the corrected two-pass): float reductions of length d, so within RMSNorm's
  // bound 10 sqrt(d) u at every mean (how far below it depends on the SIMD width the build uses).
  const Tensor1 gamma = xt::ones<float>({kDim}), beta = xt::zeros<float>({kDim});
  for (double mean : {0.0, 1.0, 100.0, 1e4}) {
    const Tensor2 x = rows_with_mean(mean);
    const DTensor2 exact = layer_norm_exact(x, kEps);
    EXPECT_LT(normwise_relative_error(ref::layer_norm(x, gamma, beta, kEps), exact), 4 * kU) << "ref, mean " << mean;
    EXPECT_LT(normwise_relative_error(opt::layer_norm(x, gamma, beta, kEps), exact),
              10 * std::sqrt(static_cast<double>(kDim)) * kU)
        << "opt, mean " << mean;
  }
}

TEST(Ch01Claims, precision_helpers_reject_bad_input) {
  const Tensor2 x = rows_with_mean(0);
  expect_error_naming([&] { layer_norm_exact(x, 0); }, "eps");
  expect_error_naming([&] { rms_norm_float32(x, -1); }, "eps");
  expect_error_naming([] { layer_norm_float32(Tensor2::from_shape({0, 4}), 1e-5); }, "x");
  expect_error_naming([&] { normwise_relative_error(x, DTensor2::from_shape({2, 2})); }, "y");
  expect_error_naming([&] { spread_relative_error(x, DTensor2::from_shape({2, 2})); }, "y");
}

// ------------------------------------------------------------------------------- dying units

TEST(Ch01Claims, relu_passes_no_gradient_for_a_fraction_phi_of_minus_mu) {
  // P(z < 0) for z ~ N(mu, 1) is Phi(-mu); a unit is dead on a batch of B independent samples with
  // probability Phi(-mu)^B. Measured fractions within 5 binomial standard deviations.
  const std::size_t units = 4096, batch = 64;
  for (double mu : {1.5, 0.0, -2.0, -3.0}) {
    const auto f = zero_gradient_fractions(Activation::relu, mu, units, batch, 0.01, 3);
    const double p = 0.5 * std::erfc(mu / std::sqrt(2.0));  // Phi(-mu)
    const double pairs = static_cast<double>(units * batch);
    EXPECT_NEAR(f.exactly_zero, p, 5 * std::sqrt(p * (1 - p) / pairs) + 1e-12) << "mu " << mu;
    EXPECT_EQ(f.below_threshold, f.exactly_zero) << "ReLU' is 0 or 1";
    const double dead = std::pow(p, static_cast<double>(batch));
    EXPECT_NEAR(f.dead_units, dead, 5 * std::sqrt(dead * (1 - dead) / units) + 1e-12) << "mu " << mu;
  }
}

TEST(Ch01Claims, gelu_and_silu_leave_no_unit_without_a_gradient) {
  for (Activation a : {Activation::gelu, Activation::silu})
    for (double mu : {0.0, -3.0}) {
      const auto f = zero_gradient_fractions(a, mu, 1024, 64, 0.01, 3);
      EXPECT_EQ(f.exactly_zero, 0.0) << activation_name(a) << ", mu " << mu;
      EXPECT_EQ(f.dead_units, 0.0) << activation_name(a) << ", mu " << mu;
    }
}

TEST(Ch01Claims, activation_derivatives_match_finite_differences_of_the_oracle) {
  // Central differences of the double oracle (oracle.cpp): error h^2 f'''/6 + eps f / h ~ 1e-10.
  const double h = 1e-5;
  for (double z = -6; z <= 6; z += 0.25) {
    EXPECT_NEAR(activation_derivative(Activation::gelu, z), (ch01::gelu_exact(z + h) - ch01::gelu_exact(z - h)) / (2 * h),
                1e-8)
        << "GELU' at " << z;
    EXPECT_NEAR(activation_derivative(Activation::silu, z),
                (ch01::silu_formula(z + h) - ch01::silu_formula(z - h)) / (2 * h), 1e-8)
        << "SiLU' at " << z;
    EXPECT_EQ(activation_derivative(Activation::relu, z), z > 0 ? 1.0 : 0.0) << "ReLU' at " << z;
  }
}

TEST(Ch01Claims, zero_gradient_fractions_reject_bad_input) {
  expect_error_naming([] { zero_gradient_fractions(Activation::relu, 0, 0, 8, 0.01, 1); }, "units");
  expect_error_naming([] { zero_gradient_fractions(Activation::relu, 0, 8, 0, 0.01, 1); }, "batch");
  expect_error_naming([] { zero_gradient_fractions(Activation::gelu, NAN, 8, 8, 0.01, 1); }, "mean");
  expect_error_naming([] { zero_gradient_fractions(Activation::silu, 0, 8, 8, 0, 1); }, "threshold");
}

}  // namespace
}  // namespace tvlab::analysis
