#include "tvlab/core/compare.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

namespace tvlab {
namespace {

std::vector<std::size_t> unravel(std::size_t flat, const std::vector<std::size_t>& shape) {
  std::vector<std::size_t> index(shape.size(), 0);
  for (std::size_t axis = shape.size(); axis-- > 0;) {
    index[axis] = flat % shape[axis];
    flat /= shape[axis];
  }
  return index;
}

}  // namespace

std::string format_index(const std::vector<std::size_t>& index, const std::vector<std::string>& axis_names) {
  std::ostringstream out;
  out << '(';
  for (std::size_t i = 0; i < index.size(); ++i) {
    if (i) out << ", ";
    if (i < axis_names.size()) out << axis_names[i] << '=';
    out << index[i];
  }
  out << ')';
  return out.str();
}

CompareReport compare(const std::vector<std::size_t>& shape, const float* actual,
                      const std::vector<std::size_t>& expected_shape, const double* expected, Tolerance tol) {
  CompareReport report;
  report.shape = shape;
  report.tolerance = tol;
  if (shape != expected_shape) {
    report.shape_mismatch = 1;
    return report;
  }
  std::size_t count = 1;
  for (auto s : shape) count *= s;
  double worst_excess = -std::numeric_limits<double>::infinity();
  std::size_t worst_flat = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const double x = actual[i];
    const double ref = expected[i];
    // Infinities and NaN are not numbers to be close to: they must match exactly, in kind and
    // sign (an expected -inf is a masked score; anything else there is a bug, however large).
    // Otherwise |x - ref| <= atol + rtol |ref|.
    const bool exact_required = !std::isfinite(x) || !std::isfinite(ref);
    const bool same_special = (std::isnan(x) && std::isnan(ref)) || x == ref;
    const double err = exact_required ? (same_special ? 0.0 : std::numeric_limits<double>::infinity())
                                      : std::fabs(x - ref);
    const double allowed = exact_required ? 0.0 : tol.atol + tol.rtol * std::fabs(ref);
    const bool bad = exact_required ? !same_special : !(err <= allowed);
    const double excess = err - allowed;
    report.max_abs_error = std::max(report.max_abs_error, err);
    if (ref != 0.0 && std::isfinite(ref)) report.max_rel_error = std::max(report.max_rel_error, err / std::fabs(ref));
    if (excess > worst_excess) {
      worst_excess = excess;
      worst_flat = i;
    }
    if (bad) {
      ++report.mismatches;
      if (report.first_mismatches.size() < 5) report.first_mismatches.push_back({unravel(i, shape), x, ref});
    }
  }
  if (count > 0) report.worst_index = unravel(worst_flat, shape);
  return report;
}

std::string CompareReport::describe(const std::vector<std::string>& axis_names) const {
  std::ostringstream out;
  out << std::setprecision(9);
  if (shape_mismatch) {
    out << "shape " << shape_string(shape) << " does not match the expected shape";
    return out.str();
  }
  out << "shape " << shape_string(shape) << ", tolerance |x - ref| <= " << tolerance.atol << " + "
      << tolerance.rtol << " * |ref|\n"
      << "max abs error " << max_abs_error << ", max rel error " << max_rel_error << ", worst at "
      << format_index(worst_index, axis_names) << "\n"
      << mismatches << " element(s) outside the tolerance";
  for (const auto& m : first_mismatches) {
    out << "\n  at " << format_index(m.index, axis_names) << ": got " << m.actual << ", expected " << m.expected;
  }
  return out.str();
}

double reduction_rtol(std::size_t k) { return 10.0 * FLT_EPSILON * std::sqrt(static_cast<double>(k)); }

double attention_tolerance(std::size_t head_dim, std::size_t seq_k, double score_magnitude, double max_abs_v) {
  return reduction_rtol(std::max(head_dim, seq_k)) * max_abs_v * (2.0 * score_magnitude + 1.0);
}

}  // namespace tvlab
