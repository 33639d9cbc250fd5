#include "tvlab/analysis/outlier_quant.hpp"

#include <algorithm>
#include <cmath>

#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::analysis {
namespace {

void validate_product(const char* fn, const DTensor2& x, const DTensor2& w) {
  require(x.dimension() == 2 && w.dimension() == 2 && x.size() > 0 && w.size() > 0, fn, "x and w must be non-empty matrices");
  require(x.shape()[1] == w.shape()[0], fn, "x has ", x.shape()[1], " columns, w has ", w.shape()[0],
          " rows: they must be equal (Y = X W)");
  for (double v : x) require(std::isfinite(v), fn, "x has a value that is not finite");
  for (double v : w) require(std::isfinite(v), fn, "w has a value that is not finite");
}

// v / s rounded to the nearest integer (ties to even) in [-127, 127], times s: one INT8 round trip.
double int8_round_trip(double v, double s) { return s == 0.0 ? 0.0 : s * std::clamp(std::nearbyint(v / s), -127.0, 127.0); }

}  // namespace

DTensor2 w8a8_product(const DTensor2& x, const DTensor2& w, Int8Scales scales) {
  validate_product("w8a8_product", x, w);
  const std::size_t t = x.shape()[0], d = x.shape()[1], n = w.shape()[1];
  // the scales s = max|.| / 127: per tensor, or per row of X and per column of W
  std::vector<double> sx(t, 0.0), sw(n, 0.0);
  for (std::size_t i = 0; i < t; ++i)
    for (std::size_t j = 0; j < d; ++j) sx[i] = std::max(sx[i], std::fabs(x(i, j)) / 127.0);
  for (std::size_t j = 0; j < d; ++j)
    for (std::size_t k = 0; k < n; ++k) sw[k] = std::max(sw[k], std::fabs(w(j, k)) / 127.0);
  if (scales == Int8Scales::per_tensor) {
    const double all_x = *std::max_element(sx.begin(), sx.end()), all_w = *std::max_element(sw.begin(), sw.end());
    std::fill(sx.begin(), sx.end(), all_x);
    std::fill(sw.begin(), sw.end(), all_w);
  }
  DTensor2 xq = DTensor2::from_shape({t, d}), wq = DTensor2::from_shape({d, n});
  for (std::size_t i = 0; i < t; ++i)
    for (std::size_t j = 0; j < d; ++j) xq(i, j) = int8_round_trip(x(i, j), sx[i]);
  for (std::size_t j = 0; j < d; ++j)
    for (std::size_t k = 0; k < n; ++k) wq(j, k) = int8_round_trip(w(j, k), sw[k]);
  // the integer products are exact; so is their double sum here (at most 127^2 d per entry)
  DTensor2 y = xt::zeros<double>({t, n});
  for (std::size_t i = 0; i < t; ++i)
    for (std::size_t j = 0; j < d; ++j)
      for (std::size_t k = 0; k < n; ++k) y(i, k) += xq(i, j) * wq(j, k);
  return y;
}

DTensor2 llm_int8_product(const DTensor2& x, const DTensor2& w, double threshold, std::size_t* outlier_channels) {
  const char* fn = "llm_int8_product";
  validate_product(fn, x, w);
  require(threshold > 0.0, fn, "threshold (", threshold, ") must be positive");
  const std::size_t t = x.shape()[0], d = x.shape()[1], n = w.shape()[1];
  // the outlier channels: max_t |X_tj| > threshold
  std::vector<bool> outlier(d, false);
  std::size_t count = 0;
  for (std::size_t j = 0; j < d; ++j) {
    for (std::size_t i = 0; i < t; ++i) outlier[j] = outlier[j] || std::fabs(x(i, j)) > threshold;
    count += outlier[j];
  }
  if (outlier_channels) *outlier_channels = count;
  // Y = X_{:,O} W_{O,:} in floating point + the rest in INT8 (the outlier columns zeroed there)
  DTensor2 rest_x = x, y = xt::zeros<double>({t, n});
  for (std::size_t j = 0; j < d; ++j) {
    if (!outlier[j]) continue;
    for (std::size_t i = 0; i < t; ++i) {
      for (std::size_t k = 0; k < n; ++k) y(i, k) += x(i, j) * w(j, k);
      rest_x(i, j) = 0.0;
    }
  }
  if (count < d) y += w8a8_product(rest_x, w, Int8Scales::vector_wise);
  return y;
}

std::vector<double> smoothing_factors(const DTensor2& x, const DTensor2& w, double alpha) {
  const char* fn = "smoothing_factors";
  validate_product(fn, x, w);
  require(alpha >= 0.0 && alpha <= 1.0, fn, "alpha (", alpha, ") must lie in [0, 1]");
  const std::size_t d = x.shape()[1];
  std::vector<double> s(d, 1.0);
  for (std::size_t j = 0; j < d; ++j) {
    double ax = 0.0, aw = 0.0;  // max_t |X_tj| and max_k |W_jk|
    for (std::size_t i = 0; i < x.shape()[0]; ++i) ax = std::max(ax, std::fabs(x(i, j)));
    for (std::size_t k = 0; k < w.shape()[1]; ++k) aw = std::max(aw, std::fabs(w(j, k)));
    if (ax > 0.0 && aw > 0.0) s[j] = std::pow(ax, alpha) / std::pow(aw, 1.0 - alpha);
  }
  return s;
}

DTensor2 smoothquant_product(const DTensor2& x, const DTensor2& w, double alpha) {
  const std::vector<double> s = smoothing_factors(x, w, alpha);
  DTensor2 xs = x, ws = w;
  for (std::size_t j = 0; j < s.size(); ++j) {
    for (std::size_t i = 0; i < x.shape()[0]; ++i) xs(i, j) /= s[j];  // X diag(s)^{-1}
    for (std::size_t k = 0; k < w.shape()[1]; ++k) ws(j, k) *= s[j];  // diag(s) W
  }
  return w8a8_product(xs, ws, Int8Scales::per_tensor);
}

double relative_output_error(const DTensor2& x, const DTensor2& w, const DTensor2& y_hat) {
  validate_product("relative_output_error", x, w);
  require(y_hat.shape()[0] == x.shape()[0] && y_hat.shape()[1] == w.shape()[1], "relative_output_error",
          "y_hat must be [tokens, d_out]");
  double err = 0.0, ref = 0.0;
  for (std::size_t i = 0; i < x.shape()[0]; ++i)
    for (std::size_t k = 0; k < w.shape()[1]; ++k) {
      double y = 0.0;
      for (std::size_t j = 0; j < x.shape()[1]; ++j) y += x(i, j) * w(j, k);
      err += (y_hat(i, k) - y) * (y_hat(i, k) - y);
      ref += y * y;
    }
  return std::sqrt(err / ref);
}

DTensor2 outlier_activations(std::uint64_t seed, std::size_t tokens) {
  require(tokens >= 1, "outlier_activations", "tokens (", tokens, ") must be at least 1");
  DTensor2 x = Rng(seed).normal_dmatrix(tokens, 256);
  for (std::size_t j : {7, 51, 130, 201})
    for (std::size_t i = 0; i < tokens; ++i) x(i, j) *= 30.0;
  return x;
}

void outlier_example(DTensor2& x, DTensor2& w) {
  Rng rng(850);
  x = rng.normal_dmatrix(64, 256);
  for (std::size_t j : {7, 51, 130, 201})  // four systematic outlier channels
    for (std::size_t i = 0; i < 64; ++i) x(i, j) *= 30.0;
  w = DTensor2::from_shape({256, 256});
  for (auto& v : w) v = rng.normal() / 16.0;  // N(0, 1/256), divided as drawn
}

}  // namespace tvlab::analysis
