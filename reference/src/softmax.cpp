#include "tvlab/ref/softmax.hpp"

#include <cmath>
#include <limits>

#include "tvlab/core/error.hpp"

namespace tvlab::ref {

Tensor2 softmax(const Tensor2& x) {
  require_nonempty("softmax", "x", x);
  require_finite_or_neg_inf("softmax", "x", x);
  const std::size_t rows = x.shape()[0], cols = x.shape()[1];
  Tensor2 y = Tensor2::from_shape({rows, cols});
  for (std::size_t i = 0; i < rows; ++i) {
    // Pass 1: m_i = max_k x_ik.
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t k = 0; k < cols; ++k) m = std::max(m, static_cast<double>(x(i, k)));
    if (m == -std::numeric_limits<double>::infinity()) {  // every entry masked: defined as 0
      for (std::size_t k = 0; k < cols; ++k) y(i, k) = 0.0f;
      continue;
    }
    // Pass 2: l_i = sum_k exp(x_ik - m_i), accumulated in double.
    double l = 0.0;
    for (std::size_t k = 0; k < cols; ++k) l += std::exp(static_cast<double>(x(i, k)) - m);
    // Pass 3: y_ij = exp(x_ij - m_i) / l_i.
    for (std::size_t j = 0; j < cols; ++j) y(i, j) = static_cast<float>(std::exp(static_cast<double>(x(i, j)) - m) / l);
  }
  return y;
}

}  // namespace tvlab::ref
