#include "tvlab/analysis/norm_precision.hpp"

#include <algorithm>
#include <cmath>

#include "tvlab/core/error.hpp"

namespace tvlab::analysis {
namespace {

void check_input(const char* fn, const Tensor2& x, double eps) {
  require(x.shape()[0] > 0 && x.shape()[1] > 0, fn, "x must have at least one row and one column, got [",
          x.shape()[0], ", ", x.shape()[1], "]");
  require(eps > 0 && std::isfinite(eps), fn, "eps (", eps, ") must be positive and finite");
}

void check_shapes(const char* fn, const Tensor2& y, const DTensor2& exact) {
  require(y.shape() == exact.shape(), fn, "y [", y.shape()[0], ", ", y.shape()[1], "] and exact [", exact.shape()[0],
          ", ", exact.shape()[1], "] must have the same shape");
  require(y.size() > 0, fn, "y must not be empty");
}

}  // namespace

namespace {

// The textbook norms with every operation in `Real`: in double they are the exact oracles (errors
// about 1e-16), in float the textbook float32 code whose rounding the chapter measures.
template <class Real>
xt::xtensor<Real, 2> layer_norm_in(const char* fn, const Tensor2& x, double eps) {
  check_input(fn, x, eps);
  const std::size_t rows = x.shape()[0], d = x.shape()[1];
  xt::xtensor<Real, 2> y = xt::xtensor<Real, 2>::from_shape({rows, d});
  const Real eps_r = static_cast<Real>(eps), d_r = static_cast<Real>(d);
  for (std::size_t t = 0; t < rows; ++t) {
    // mu = (1/d) sum_j x_j: in float the running sum reaches d |mu|, and each addition rounds it.
    Real sum = 0;
    for (std::size_t j = 0; j < d; ++j) sum += x(t, j);
    const Real mu = sum / d_r;
    // sigma^2 = (1/d) sum_j (x_j - mu)^2 around the (rounded) mu.
    Real sq = 0;
    for (std::size_t j = 0; j < d; ++j) {
      const Real c = x(t, j) - mu;
      sq += c * c;
    }
    const Real rstd = Real(1) / std::sqrt(sq / d_r + eps_r);
    for (std::size_t j = 0; j < d; ++j) y(t, j) = (x(t, j) - mu) * rstd;
  }
  return y;
}

template <class Real>
xt::xtensor<Real, 2> rms_norm_in(const char* fn, const Tensor2& x, double eps) {
  check_input(fn, x, eps);
  const std::size_t rows = x.shape()[0], d = x.shape()[1];
  xt::xtensor<Real, 2> y = xt::xtensor<Real, 2>::from_shape({rows, d});
  const Real eps_r = static_cast<Real>(eps), d_r = static_cast<Real>(d);
  for (std::size_t t = 0; t < rows; ++t) {
    // r = sqrt((1/d) sum_j x_j^2 + eps): only additions of positive terms, no cancellation.
    Real sq = 0;
    for (std::size_t j = 0; j < d; ++j) sq += static_cast<Real>(x(t, j)) * static_cast<Real>(x(t, j));
    const Real r = std::sqrt(sq / d_r + eps_r);
    for (std::size_t j = 0; j < d; ++j) y(t, j) = x(t, j) / r;
  }
  return y;
}

}  // namespace

DTensor2 layer_norm_exact(const Tensor2& x, double eps) { return layer_norm_in<double>("layer_norm_exact", x, eps); }
DTensor2 rms_norm_exact(const Tensor2& x, double eps) { return rms_norm_in<double>("rms_norm_exact", x, eps); }
Tensor2 layer_norm_float32(const Tensor2& x, double eps) { return layer_norm_in<float>("layer_norm_float32", x, eps); }
Tensor2 rms_norm_float32(const Tensor2& x, double eps) { return rms_norm_in<float>("rms_norm_float32", x, eps); }

double normwise_relative_error(const Tensor2& y, const DTensor2& exact) {
  check_shapes("normwise_relative_error", y, exact);
  double worst = 0;
  for (std::size_t t = 0; t < y.shape()[0]; ++t) {
    double err = 0, size = 0;
    for (std::size_t j = 0; j < y.shape()[1]; ++j) {
      err = std::max(err, std::fabs(y(t, j) - exact(t, j)));
      size = std::max(size, std::fabs(exact(t, j)));
    }
    worst = std::max(worst, size > 0 ? err / size : err);
  }
  return worst;
}

double spread_relative_error(const Tensor2& y, const DTensor2& exact) {
  check_shapes("spread_relative_error", y, exact);
  const std::size_t d = y.shape()[1];
  double worst = 0;
  for (std::size_t t = 0; t < y.shape()[0]; ++t) {
    double mean = 0, err = 0;
    for (std::size_t j = 0; j < d; ++j) mean += exact(t, j) / static_cast<double>(d);
    double var = 0;
    for (std::size_t j = 0; j < d; ++j) {
      var += (exact(t, j) - mean) * (exact(t, j) - mean) / static_cast<double>(d);
      err = std::max(err, std::fabs(y(t, j) - exact(t, j)));
    }
    worst = std::max(worst, var > 0 ? err / std::sqrt(var) : err);
  }
  return worst;
}

}  // namespace tvlab::analysis
