// The template chapter's exercise: worked solution. Each marked region is what a student
// writes; scripts/make_student.py turns this file into student.cpp with the regions replaced by
// NotImplemented stubs. Edit this file, then regenerate (`make student-stubs`).

#include <cmath>
#include <limits>

#include "tvlab/core/error.hpp"
#include "tvlab/student/example.hpp"

namespace tvlab::student {

Tensor2 example_softmax(const Tensor2& x) {
  // BEGIN EXERCISE 99.1 "the row softmax" "The example"
  require_nonempty("example_softmax", "x", x);
  require_finite_or_neg_inf("example_softmax", "x", x);
  const std::size_t rows = x.shape()[0], cols = x.shape()[1];
  Tensor2 y = Tensor2::from_shape({rows, cols});
  for (std::size_t i = 0; i < rows; ++i) {
    // m = max_j x_ij keeps every exponent <= 0; a row of only -inf gets weight 0 everywhere.
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < cols; ++j) m = std::max(m, static_cast<double>(x(i, j)));
    double l = 0.0;
    for (std::size_t j = 0; j < cols; ++j) l += m == -INFINITY ? 0.0 : std::exp(x(i, j) - m);
    for (std::size_t j = 0; j < cols; ++j)
      y(i, j) = l == 0.0 ? 0.0f : static_cast<float>(std::exp(x(i, j) - m) / l);
  }
  return y;
  // END EXERCISE
}

}  // namespace tvlab::student
