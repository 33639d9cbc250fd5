#pragma once
/// @file
/// Comparing a float result with a double-precision oracle, element by element:
/// an element passes when \f$ |x - x_{ref}| \le atol + rtol\,|x_{ref}| \f$. Infinities and NaN
/// are compared exactly: an expected \f$ -\infty \f$ (a masked score) passes only for
/// \f$ -\infty \f$, an expected NaN only for NaN, and a finite expected value never for a
/// non-finite one (the rule above would accept anything where \f$ |x_{ref}| = \infty \f$).
/// The report names the worst element by coordinates, so a failure message can say
/// "worst at (h=1, i=37, d=5)".

#include <cstddef>
#include <string>
#include <vector>

#include "tvlab/core/tensor.hpp"

namespace tvlab {

struct Tolerance {
  double atol = 1e-6;
  double rtol = 1e-6;
};

struct Mismatch {
  std::vector<std::size_t> index;
  double actual = 0.0;
  double expected = 0.0;
};

struct CompareReport {
  std::vector<std::size_t> shape;
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;           ///< |x - ref| / |ref| over elements with ref != 0
  std::vector<std::size_t> worst_index; ///< element with the largest excess over its tolerance
  std::size_t mismatches = 0;           ///< elements outside the tolerance (NaN counts)
  std::size_t shape_mismatch = 0;       ///< 1 when the shapes differ (nothing else is compared)
  std::vector<Mismatch> first_mismatches;  ///< up to 5, in row-major order
  Tolerance tolerance;

  bool ok() const { return shape_mismatch == 0 && mismatches == 0; }
  /// Multi-line description; `axis_names` such as {"h", "i", "d"} label the coordinates.
  std::string describe(const std::vector<std::string>& axis_names = {}) const;
};

/// Compares any float tensor with a double tensor of the same rank.
CompareReport compare(const std::vector<std::size_t>& shape, const float* actual,
                      const std::vector<std::size_t>& expected_shape, const double* expected, Tolerance tol);

template <class A, class E>
CompareReport compare(const A& actual, const E& expected, Tolerance tol) {
  return compare(shape_of(actual), actual.data(), shape_of(expected), expected.data(), tol);
}

/// The tolerances every comparison of this project uses, tests, walkthroughs and benchmarks alike.
///
/// A float reduction of length k against a double oracle: random rounding errors add like a
/// random walk, so the relative error grows as \f$ \sqrt{k} \f$; c = 10 leaves room for the
/// worst element: \f$ \text{rtol} = 10\,\epsilon_{32} \sqrt{k} \f$.
double reduction_rtol(std::size_t k);

/// max |out - ref| allowed for attention computed in float: a score error \f$ \delta \f$ moves an
/// output by at most \f$ 2\delta \max|v| \f$, a score of magnitude M (the sum of |terms| in
/// scale \f$ q\cdot k \f$ plus the bias) carries \f$ \delta \le \text{rtol}\,M \f$, and the weighted
/// sum of values adds \f$ \text{rtol} \max|v| \f$: \f$ \text{rtol}\,\max|v|\,(2M + 1) \f$ with
/// rtol = reduction_rtol(max(head_dim, seq_k)).
double attention_tolerance(std::size_t head_dim, std::size_t seq_k, double score_magnitude, double max_abs_v);

/// "(h=1, i=37, d=5)" or "(1, 37, 5)" without names.
std::string format_index(const std::vector<std::size_t>& index, const std::vector<std::string>& axis_names);

}  // namespace tvlab
