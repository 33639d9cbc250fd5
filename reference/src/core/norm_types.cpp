#include "tvlab/core/norm_types.hpp"

#include <cmath>

#include "tvlab/core/error.hpp"

namespace tvlab {

void validate_norm(const char* fn, NormKind kind, const Tensor2& x, const Tensor1& gamma, const Tensor1* beta, const Tensor2* dy,
                   double eps, bool check_x_values) {
  require_nonempty(fn, "x", x);
  const std::size_t d_model = x.shape()[1];
  require_dim(fn, "gamma", gamma, 0, "length", d_model, "d_model, the columns of x");
  if (beta) require_dim(fn, "beta", *beta, 0, "length", d_model, "d_model, the columns of x");
  if (dy) {
    require(dy->shape() == x.shape(), fn, "dy has shape ", shape_string_of(*dy), ", expected the shape of x ",
            shape_string_of(x));
  }
  require(std::isfinite(eps) && eps >= 0.0, fn, "eps (", eps, ") must be finite and >= 0");
  if (check_x_values) require_finite(fn, "x", x);
  require_finite(fn, "gamma", gamma);
  if (beta) require_finite(fn, "beta", *beta);
  if (dy) require_finite(fn, "dy", *dy);
  if (eps == 0.0) {
    for (std::size_t t = 0; t < x.shape()[0]; ++t) {
      bool degenerate = true;  // LayerNorm: all equal; RMSNorm: all zero
      for (std::size_t j = 0; j < d_model && degenerate; ++j)
        degenerate = kind == NormKind::layer_norm ? x(t, j) == x(t, 0) : x(t, j) == 0.0f;
      require(!degenerate, fn, "eps is 0 and row ", t, " of x has ",
              kind == NormKind::layer_norm ? "zero variance" : "zero mean square", ": the output would be 0/0");
    }
  }
}

}  // namespace tvlab
