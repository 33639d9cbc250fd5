#include "tvlab/opt/normalization.hpp"

#include <omp.h>

#include <cmath>
#include <vector>

namespace tvlab::opt {
namespace {

// Work on a row only pays for a thread when the matrix is big enough.
bool worth_threading(std::size_t rows, std::size_t d) { return rows > 1 && rows * d >= 16384; }

struct RowStats {
  float mean;
  float rstd;
};

// Two SIMD passes in float: the mean, then the variance around it (no E[x^2] - E[x]^2
// cancellation, which loses everything when |mean| >> std).
RowStats layer_norm_stats(const float* x, std::size_t d, double eps) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (std::size_t j = 0; j < d; ++j) sum += x[j];
  const float mean = sum / static_cast<float>(d);
  float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
  for (std::size_t j = 0; j < d; ++j) sq += (x[j] - mean) * (x[j] - mean);
  const float var = sq / static_cast<float>(d);
  return {mean, static_cast<float>(1.0 / std::sqrt(static_cast<double>(var) + eps))};
}

float rms_rstd(const float* x, std::size_t d, double eps) {
  float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
  for (std::size_t j = 0; j < d; ++j) sq += x[j] * x[j];
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(sq) / static_cast<double>(d) + eps));
}

}  // namespace

Tensor2 layer_norm(const Tensor2& x, const Tensor1& gamma, const Tensor1& beta, double eps) {
  validate_norm("layer_norm", x, gamma, &beta, nullptr, eps);
  const std::size_t rows = x.shape()[0], d = x.shape()[1];
  Tensor2 y = Tensor2::from_shape({rows, d});
  const float* g = gamma.data();
  const float* b = beta.data();
#pragma omp parallel for schedule(static) if (worth_threading(rows, d))
  for (std::ptrdiff_t t = 0; t < static_cast<std::ptrdiff_t>(rows); ++t) {
    const float* xr = x.data() + static_cast<std::size_t>(t) * d;
    float* yr = y.data() + static_cast<std::size_t>(t) * d;
    const RowStats s = layer_norm_stats(xr, d, eps);
    // Fused: y = gamma * (x - mean) * rstd + beta in one pass.
#pragma omp simd
    for (std::size_t j = 0; j < d; ++j) yr[j] = g[j] * ((xr[j] - s.mean) * s.rstd) + b[j];
  }
  return y;
}

LayerNormGrads layer_norm_backward(const Tensor2& x, const Tensor1& gamma, const Tensor2& dy, double eps) {
  validate_norm("layer_norm_backward", x, gamma, nullptr, &dy, eps);
  const std::size_t rows = x.shape()[0], d = x.shape()[1];
  LayerNormGrads out{Tensor2::from_shape({rows, d}), xt::zeros<float>({d}), xt::zeros<float>({d})};
  const float* g = gamma.data();
#pragma omp parallel if (worth_threading(rows, d))
  {
    // Per-thread partial sums of dgamma and dbeta, added once at the end (no atomics per element).
    std::vector<float> dgamma(d, 0.0f), dbeta(d, 0.0f), xhat(d);
#pragma omp for schedule(static)
    for (std::ptrdiff_t t = 0; t < static_cast<std::ptrdiff_t>(rows); ++t) {
      const float* xr = x.data() + static_cast<std::size_t>(t) * d;
      const float* dyr = dy.data() + static_cast<std::size_t>(t) * d;
      float* dxr = out.dx.data() + static_cast<std::size_t>(t) * d;
      const RowStats s = layer_norm_stats(xr, d, eps);
      float sum_g = 0.0f, sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
      for (std::size_t j = 0; j < d; ++j) {
        xhat[j] = (xr[j] - s.mean) * s.rstd;
        const float gj = g[j] * dyr[j];
        sum_g += gj;
        sum_gx += gj * xhat[j];
        dgamma[j] += dyr[j] * xhat[j];
        dbeta[j] += dyr[j];
      }
      const float mean_g = sum_g / static_cast<float>(d), mean_gx = sum_gx / static_cast<float>(d);
#pragma omp simd
      for (std::size_t j = 0; j < d; ++j) dxr[j] = s.rstd * (g[j] * dyr[j] - mean_g - xhat[j] * mean_gx);
    }
#pragma omp critical
    for (std::size_t j = 0; j < d; ++j) {
      out.dgamma(j) += dgamma[j];
      out.dbeta(j) += dbeta[j];
    }
  }
  return out;
}

Tensor2 rms_norm(const Tensor2& x, const Tensor1& gamma, double eps) {
  validate_norm("rms_norm", x, gamma, nullptr, nullptr, eps);
  const std::size_t rows = x.shape()[0], d = x.shape()[1];
  Tensor2 y = Tensor2::from_shape({rows, d});
  const float* g = gamma.data();
#pragma omp parallel for schedule(static) if (worth_threading(rows, d))
  for (std::ptrdiff_t t = 0; t < static_cast<std::ptrdiff_t>(rows); ++t) {
    const float* xr = x.data() + static_cast<std::size_t>(t) * d;
    float* yr = y.data() + static_cast<std::size_t>(t) * d;
    const float rstd = rms_rstd(xr, d, eps);
#pragma omp simd
    for (std::size_t j = 0; j < d; ++j) yr[j] = g[j] * (xr[j] * rstd);
  }
  return y;
}

RmsNormGrads rms_norm_backward(const Tensor2& x, const Tensor1& gamma, const Tensor2& dy, double eps) {
  validate_norm("rms_norm_backward", x, gamma, nullptr, &dy, eps);
  const std::size_t rows = x.shape()[0], d = x.shape()[1];
  RmsNormGrads out{Tensor2::from_shape({rows, d}), xt::zeros<float>({d})};
  const float* g = gamma.data();
#pragma omp parallel if (worth_threading(rows, d))
  {
    std::vector<float> dgamma(d, 0.0f);
#pragma omp for schedule(static)
    for (std::ptrdiff_t t = 0; t < static_cast<std::ptrdiff_t>(rows); ++t) {
      const float* xr = x.data() + static_cast<std::size_t>(t) * d;
      const float* dyr = dy.data() + static_cast<std::size_t>(t) * d;
      float* dxr = out.dx.data() + static_cast<std::size_t>(t) * d;
      const float rstd = rms_rstd(xr, d, eps);
      float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_gx)
      for (std::size_t j = 0; j < d; ++j) {
        const float xhat = xr[j] * rstd;
        sum_gx += g[j] * dyr[j] * xhat;
        dgamma[j] += dyr[j] * xhat;
      }
      const float mean_gx = sum_gx / static_cast<float>(d);
#pragma omp simd
      for (std::size_t j = 0; j < d; ++j) dxr[j] = rstd * (g[j] * dyr[j] - xr[j] * rstd * mean_gx);
    }
#pragma omp critical
    for (std::size_t j = 0; j < d; ++j) out.dgamma(j) += dgamma[j];
  }
  return out;
}

}  // namespace tvlab::opt
