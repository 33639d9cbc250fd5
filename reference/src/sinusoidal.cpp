#include "tvlab/ref/sinusoidal.hpp"

#include <cmath>

#include "tvlab/core/error.hpp"

namespace tvlab::ref {

Tensor2 sinusoidal_position_encoding(long long seq, int d_model, double base, long long first_position) {
  const char* fn = "sinusoidal_position_encoding";
  require_positive(fn, "seq", seq);
  require(d_model > 0 && d_model % 2 == 0, fn, "d_model (", d_model, ") must be positive and even (sin/cos pairs)");
  require(std::isfinite(base) && base > 1.0, fn, "base (", base, ") must be finite and > 1");
  require(first_position >= 0, fn, "first_position (", first_position, ") must be >= 0");
  const auto n = static_cast<std::size_t>(seq), d = static_cast<std::size_t>(d_model);
  Tensor2 pe = Tensor2::from_shape({n, d});
  for (std::size_t t = 0; t < n; ++t) {
    const double p = static_cast<double>(first_position) + static_cast<double>(t);
    for (std::size_t i = 0; i < d / 2; ++i) {
      // omega_i = base^(-2i/d); the angle in double so large positions keep their phase.
      const double omega = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
      pe(t, 2 * i) = static_cast<float>(std::sin(p * omega));
      pe(t, 2 * i + 1) = static_cast<float>(std::cos(p * omega));
    }
  }
  return pe;
}

}  // namespace tvlab::ref
