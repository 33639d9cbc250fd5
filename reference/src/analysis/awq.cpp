#include "tvlab/analysis/awq.hpp"

#include <algorithm>
#include <cmath>

#include "tvlab/analysis/outlier_quant.hpp"
#include "tvlab/core/error.hpp"

namespace tvlab::analysis {

DTensor2 int4_groupwise(const DTensor2& w, std::size_t group) {
  const char* fn = "int4_groupwise";
  require(w.dimension() == 2 && w.size() > 0, fn, "w must be a non-empty matrix");
  const std::size_t d_in = w.shape()[0], d_out = w.shape()[1];
  require(group >= 1 && d_in % group == 0, fn, "group (", group, ") must divide d_in (", d_in, ")");
  for (double v : w) require(std::isfinite(v), fn, "w has a value that is not finite");
  DTensor2 q = DTensor2::from_shape({d_in, d_out});
  for (std::size_t k = 0; k < d_out; ++k)
    for (std::size_t g0 = 0; g0 < d_in; g0 += group) {
      // s = max|w| / 7 over the group; each weight to the nearest of s {-7..7}, ties to even
      double amax = 0.0;
      for (std::size_t j = g0; j < g0 + group; ++j) amax = std::max(amax, std::fabs(w(j, k)));
      const double s = amax / 7.0;
      for (std::size_t j = g0; j < g0 + group; ++j)
        q(j, k) = s == 0.0 ? 0.0 : s * std::clamp(std::nearbyint(w(j, k) / s), -7.0, 7.0);
    }
  return q;
}

DTensor2 awq_product(const DTensor2& x, const DTensor2& w, const DTensor2& calibration, double alpha, std::size_t group) {
  const char* fn = "awq_product";
  require(alpha >= 0.0 && alpha <= 1.0, fn, "alpha (", alpha, ") must lie in [0, 1]");
  require(x.dimension() == 2 && calibration.dimension() == 2 && w.dimension() == 2 && x.shape()[1] == w.shape()[0] &&
              calibration.shape()[1] == w.shape()[0] && calibration.shape()[0] > 0,
          fn, "x and calibration must have as many columns as w has rows (", w.shape()[0], ")");
  const std::size_t t = x.shape()[0], d_in = w.shape()[0], d_out = w.shape()[1];
  // s_j = (mean_t |calibration_tj|)^alpha
  std::vector<double> s(d_in, 1.0);
  for (std::size_t j = 0; j < d_in; ++j) {
    double mean = 0.0;
    for (std::size_t i = 0; i < calibration.shape()[0]; ++i) mean += std::fabs(calibration(i, j));
    mean /= static_cast<double>(calibration.shape()[0]);
    if (mean > 0.0) s[j] = std::pow(mean, alpha);
  }
  DTensor2 scaled_w = w;
  for (std::size_t j = 0; j < d_in; ++j)
    for (std::size_t k = 0; k < d_out; ++k) scaled_w(j, k) *= s[j];  // diag(s) W
  const DTensor2 q = int4_groupwise(scaled_w, group);
  // (X diag(s)^-1) Q(diag(s) W)
  DTensor2 y = xt::zeros<double>({t, d_out});
  for (std::size_t i = 0; i < t; ++i)
    for (std::size_t j = 0; j < d_in; ++j) {
      const double xs = x(i, j) / s[j];
      for (std::size_t k = 0; k < d_out; ++k) y(i, k) += xs * q(j, k);
    }
  return y;
}

AwqSearch awq_search(const DTensor2& calibration, const DTensor2& w, std::size_t group) {
  AwqSearch out;
  double best = INFINITY;
  for (int step = 0; step <= 20; ++step) {
    const double alpha = step / 20.0;
    const double err = relative_output_error(calibration, w, awq_product(calibration, w, calibration, alpha, group));
    out.alphas.push_back(alpha);
    out.losses.push_back(err * err);  // relative: the loss over ||X W||^2
    if (err * err < best) best = err * err, out.best_alpha = alpha;
  }
  return out;
}

}  // namespace tvlab::analysis
