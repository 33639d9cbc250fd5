#include "tvlab/ref/activations.hpp"

#include <cmath>
#include <numbers>

#include "tvlab/core/error.hpp"

namespace tvlab::ref {
namespace {

template <class F>
Tensor2 elementwise(const char* fn, const Tensor2& x, F f) {
  require_finite(fn, "x", x);
  Tensor2 y = Tensor2::from_shape({x.shape()[0], x.shape()[1]});
  for (std::size_t i = 0; i < x.shape()[0]; ++i)
    for (std::size_t j = 0; j < x.shape()[1]; ++j) y(i, j) = static_cast<float>(f(static_cast<double>(x(i, j))));
  return y;
}

}  // namespace

Tensor2 relu(const Tensor2& x) {
  return elementwise("relu", x, [](double v) { return v > 0.0 ? v : 0.0; });
}

// x * Phi(x), Phi the standard normal CDF = (1 + erf(x / sqrt 2)) / 2.
Tensor2 gelu(const Tensor2& x) {
  return elementwise("gelu", x, [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::numbers::sqrt2)); });
}

// x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))).
Tensor2 gelu_tanh(const Tensor2& x) {
  return elementwise("gelu_tanh", x, [](double v) {
    const double sqrt_2_over_pi = std::sqrt(2.0 / std::numbers::pi);
    return 0.5 * v * (1.0 + std::tanh(sqrt_2_over_pi * (v + 0.044715 * v * v * v)));
  });
}

// x * sigmoid(x) = x / (1 + exp(-x)).
Tensor2 silu(const Tensor2& x) {
  return elementwise("silu", x, [](double v) { return v / (1.0 + std::exp(-v)); });
}

}  // namespace tvlab::ref
