#include "tvlab/core/norm_types.hpp"

#include <cmath>

#include "tvlab/core/error.hpp"

namespace tvlab {

void validate_norm(const char* fn, const Tensor2& x, const Tensor1& gamma, const Tensor1* beta, const Tensor2* dy,
                   double eps) {
  require_nonempty(fn, "x", x);
  const std::size_t d_model = x.shape()[1];
  require_dim(fn, "gamma", gamma, 0, "length", d_model, "d_model, the columns of x");
  if (beta) require_dim(fn, "beta", *beta, 0, "length", d_model, "d_model, the columns of x");
  if (dy) {
    require(dy->shape() == x.shape(), fn, "dy has shape ", shape_string_of(*dy), ", expected the shape of x ",
            shape_string_of(x));
  }
  require(std::isfinite(eps) && eps >= 0.0, fn, "eps (", eps, ") must be finite and >= 0");
  require_finite(fn, "x", x);
  require_finite(fn, "gamma", gamma);
  if (beta) require_finite(fn, "beta", *beta);
  if (dy) require_finite(fn, "dy", *dy);
}

}  // namespace tvlab
