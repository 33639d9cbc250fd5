#include "tvlab/analysis/dying_units.hpp"

#include <cmath>

#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::analysis {

const char* activation_name(Activation activation) {
  switch (activation) {
    case Activation::relu: return "ReLU";
    case Activation::gelu: return "GELU";
    case Activation::silu: return "SiLU";
  }
  return "?";
}

double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

double activation_derivative(Activation activation, double z) {
  switch (activation) {
    case Activation::relu:
      // d/dz max(0, z): 1 above 0, 0 below (and 0 at z = 0).
      return z > 0 ? 1.0 : 0.0;
    case Activation::gelu: {
      // d/dz z Phi(z) = Phi(z) + z phi(z), phi(z) = exp(-z^2/2) / sqrt(2 pi).
      const double phi = std::exp(-0.5 * z * z) / std::sqrt(2 * 3.141592653589793);
      return normal_cdf(z) + z * phi;
    }
    case Activation::silu: {
      // d/dz z s(z) = s(z) + z s(z)(1 - s(z)), s = 1 / (1 + e^-z).
      const double s = 1 / (1 + std::exp(-z));
      return s * (1 + z * (1 - s));
    }
  }
  fail("activation_derivative", "activation (", static_cast<int>(activation),
       ") is not a tvlab::analysis::Activation");
}

ZeroGradientFractions zero_gradient_fractions(Activation activation, double mean, std::size_t units, std::size_t batch,
                                              double threshold, std::uint64_t seed) {
  const char* fn = "zero_gradient_fractions";
  require(units > 0, fn, "units (", units, ") must be positive");
  require(batch > 0, fn, "batch (", batch, ") must be positive");
  require(std::isfinite(mean), fn, "mean (", mean, ") must be finite");
  require(threshold > 0 && std::isfinite(threshold), fn, "threshold (", threshold, ") must be positive and finite");
  Rng rng(seed);
  std::size_t zero = 0, small = 0, dead = 0;
  for (std::size_t u = 0; u < units; ++u) {
    bool no_gradient_on_batch = true;
    for (std::size_t b = 0; b < batch; ++b) {
      const double g = activation_derivative(activation, mean + rng.normal());
      zero += g == 0.0;
      small += std::fabs(g) < threshold;
      no_gradient_on_batch = no_gradient_on_batch && g == 0.0;
    }
    dead += no_gradient_on_batch;
  }
  const double pairs = static_cast<double>(units) * static_cast<double>(batch);
  return {static_cast<double>(zero) / pairs, static_cast<double>(small) / pairs,
          static_cast<double>(dead) / static_cast<double>(units)};
}

}  // namespace tvlab::analysis
