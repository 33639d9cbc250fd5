#pragma once
/// @file
/// ReLU's dying units against GELU and SiLU (chapter 01): how often each activation passes no
/// gradient back, for pre-activations \f$ z \sim N(\mu, 1) \f$ (a bias shift moves \f$ \mu \f$).
///
/// \f$ \mathrm{ReLU}'(z) = 0 \f$ for every \f$ z < 0 \f$, so a fraction \f$ \Phi(-\mu) \f$ of the
/// pre-activations gets no gradient, and a unit whose \f$ B \f$ samples all fall below 0 (probability
/// \f$ \Phi(-\mu)^B \f$) receives no update from the batch at all. GELU's derivative
/// \f$ \Phi(z) + z\varphi(z) \f$ and SiLU's \f$ \sigma(z)(1 + z(1 - \sigma(z))) \f$ vanish only at
/// one point each (\f$ z \approx -0.75 \f$ and \f$ z \approx -2.40 \f$) and underflow only far in the tail.

#include <cstddef>
#include <cstdint>

namespace tvlab::analysis {

enum class Activation { relu, gelu, silu };
const char* activation_name(Activation activation);

/// The derivative in double: ReLU' (0 at z <= 0; the subgradient 0 at z = 0, as PyTorch takes it),
/// GELU' \f$ = \Phi(z) + z\varphi(z) \f$ (the exact GELU), SiLU' \f$ = \sigma(z)(1 + z(1 - \sigma(z))) \f$.
double activation_derivative(Activation activation, double z);

/// Measured over `units` x `batch` pre-activations \f$ z \sim N(\mu, 1) \f$ (deterministic for a seed).
struct ZeroGradientFractions {
  double exactly_zero = 0;   ///< fraction of (unit, sample) pairs with \f$ f'(z) = 0 \f$ in double
  double below_threshold = 0;  ///< fraction with \f$ |f'(z)| < \f$ threshold ("nearly dead")
  double dead_units = 0;     ///< fraction of units with \f$ f'(z) = 0 \f$ on every sample of the batch
};

/// Throws `tvlab::Error` naming the parameter for units or batch of 0, a non-finite mean, or a
/// threshold that is not positive.
ZeroGradientFractions zero_gradient_fractions(Activation activation, double mean, std::size_t units, std::size_t batch,
                                              double threshold, std::uint64_t seed);

/// \f$ \Phi(x) = \frac12\,\mathrm{erfc}(-x/\sqrt2) \f$, the standard normal CDF.
double normal_cdf(double x);

}  // namespace tvlab::analysis
