#include "tvlab/analysis/e8_lattice.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "tvlab/core/error.hpp"

namespace tvlab::analysis {
namespace {

double norm_sq(const Vec8& v) {
  double s = 0.0;
  for (double x : v) s += x * x;
  return s;
}

double distance_sq(const Vec8& a, const Vec8& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < 8; ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
  return s;
}

// The point of D8 (integers with an even sum) nearest to y.
Vec8 nearest_d8(const Vec8& y) {
  Vec8 z;
  long long sum = 0;
  std::size_t worst = 0;
  double worst_gap = -1.0;
  for (std::size_t i = 0; i < 8; ++i) {
    z[i] = std::round(y[i]);
    sum += static_cast<long long>(z[i]);
    const double gap = std::fabs(y[i] - z[i]);
    if (gap > worst_gap) worst_gap = gap, worst = i;
  }
  // an odd sum: move the worst-rounded coordinate to its other neighbouring integer
  if (sum % 2 != 0) z[worst] += y[worst] > z[worst] ? 1.0 : -1.0;
  return z;
}

// The rows of w, each scaled by the s of least squared error among rms / rho, coded group by group.
DTensor2 code_rows(const DTensor2& w, std::size_t group, const std::function<void(const double*, double, double*)>& code) {
  DTensor2 out = DTensor2::from_shape({w.shape()[0], w.shape()[1]});
  std::vector<double> candidate(w.shape()[1]);
  for (std::size_t r = 0; r < w.shape()[0]; ++r) {
    double sum_sq = 0.0;
    for (std::size_t j = 0; j < w.shape()[1]; ++j) sum_sq += w(r, j) * w(r, j);
    const double rms = std::sqrt(sum_sq / static_cast<double>(w.shape()[1]));
    double best = INFINITY;
    for (int k = 5; k <= 15; ++k) {
      const double s = rms == 0.0 ? 1.0 : rms / (0.1 * k);
      for (std::size_t j = 0; j < w.shape()[1]; j += group) code(&w(r, j), s, &candidate[j]);
      double err = 0.0;
      for (std::size_t j = 0; j < w.shape()[1]; ++j) err += (w(r, j) - candidate[j]) * (w(r, j) - candidate[j]);
      if (err < best) {
        best = err;
        for (std::size_t j = 0; j < w.shape()[1]; ++j) out(r, j) = candidate[j];
      }
    }
  }
  return out;
}

void validate_rows(const char* fn, const DTensor2& w, std::size_t multiple) {
  require(w.dimension() == 2 && w.size() > 0, fn, "w must be a non-empty matrix");
  require(w.shape()[1] % multiple == 0, fn, "w's row length (", w.shape()[1], ") must be a multiple of ", multiple);
  for (double v : w) require(std::isfinite(v), fn, "w has a value that is not finite");
}

}  // namespace

Vec8 nearest_e8(const Vec8& y) {
  const Vec8 a = nearest_d8(y);
  Vec8 shifted;
  for (std::size_t i = 0; i < 8; ++i) shifted[i] = y[i] - 0.5;
  Vec8 b = nearest_d8(shifted);
  for (double& x : b) x += 0.5;
  return distance_sq(y, a) <= distance_sq(y, b) ? a : b;
}

DTensor2 e8_quantize_rows(const DTensor2& w) {
  validate_rows("e8_quantize_rows", w, 8);
  return code_rows(w, 8, [](const double* x, double s, double* out) {
    Vec8 y;
    for (std::size_t i = 0; i < 8; ++i) y[i] = x[i] / s;
    Vec8 p = nearest_e8(y);
    // outside the codebook's ball: shrink y until its nearest point is inside
    while (norm_sq(p) > kE8CodebookNormSq) {
      for (double& v : y) v *= 0.9;
      p = nearest_e8(y);
    }
    for (std::size_t i = 0; i < 8; ++i) out[i] = s * p[i];
  });
}

DTensor2 uniform_2bit_rows(const DTensor2& w) {
  validate_rows("uniform_2bit_rows", w, 1);
  return code_rows(w, 1, [](const double* x, double s, double* out) {
    // the nearest of s {-3/2, -1/2, 1/2, 3/2}
    const double level = std::clamp(std::floor(*x / s) + 0.5, -1.5, 1.5);
    *out = s * level;
  });
}

}  // namespace tvlab::analysis
