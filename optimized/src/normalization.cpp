#include "tvlab/opt/normalization.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tvlab/core/error.hpp"

namespace tvlab::opt {
namespace {

// Work on a row only pays for a thread when the matrix is big enough.
bool worth_threading(std::size_t rows, std::size_t d) { return rows > 1 && rows * d >= 16384; }

// The statistics of one row: its values are centred as (x - shift) - offset, mean = shift + offset.
struct RowStats {
  float shift;   // the row's first value
  float offset;  // mean - shift, small when the shift is near the mean
  float rstd;
  float sum_sq;  // sum of (x - mean)^2, kept to spot rows that float cannot handle
};

// Below this a float sum of squares may be built from subnormal squares (|x| < 1e-19), which
// have lost most of their digits: such rows are redone in double.
constexpr float kTinySumOfSquares = 1e-30f;

// Two SIMD passes in float, shifted and corrected (Chan, Golub and LeVeque's corrected two-pass
// algorithm), so that the error depends on the row's spread, not on its mean:
//   pass 1: o = sum_j (x_j - k) / d with k = x_0. A plain float sum of x_j would carry rounding
//           errors of the size of |mean| (about u |mean| sqrt(d) / lanes), and every centred value
//           would inherit them; x_j - k is exact for the values near k (Sterbenz) and of the size
//           of the spread, so the sum's errors are too.
//   pass 2: c_j = (x_j - k) - o, S = sum_j c_j^2 and the correction e = sum_j c_j / d (zero in exact
//           arithmetic: it measures what pass 1 lost, which matters when x_0 is far from the mean);
//           var = S / d - e^2, offset = o + e.
// No E[x^2] - E[x]^2 cancellation. Float keeps eight (AVX2) or sixteen (AVX-512) lanes per register,
// so the passes run at memory speed; rows where float is not enough are redone in double (see
// redo_flagged_rows).
RowStats layer_norm_stats(const float* x, std::size_t d, double eps) {
  const float shift = x[0];
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (std::size_t j = 0; j < d; ++j) sum += x[j] - shift;
  const float o = sum / static_cast<float>(d);
  float sq = 0.0f, residual = 0.0f;
#pragma omp simd reduction(+ : sq, residual)
  for (std::size_t j = 0; j < d; ++j) {
    const float c = (x[j] - shift) - o;
    sq += c * c;
    residual += c;
  }
  const double e = static_cast<double>(residual) / static_cast<double>(d);
  const double var = std::max(static_cast<double>(sq) / static_cast<double>(d) - e * e, 0.0);
  return {shift, static_cast<float>(o + e), static_cast<float>(1.0 / std::sqrt(var + eps)), sq};
}

// The backward pass has no memory-bandwidth target to meet (it reads x, dy and writes dx), so
// its statistics are simply accumulated in double: no overflow, no subnormal squares.
struct RowStatsDouble {
  double mean;
  double rstd;
};

RowStatsDouble row_stats_double(const float* x, std::size_t d, double eps, bool centred) {
  double mean = 0.0;
  if (centred) {
#pragma omp simd reduction(+ : mean)
    for (std::size_t j = 0; j < d; ++j) mean += x[j];
    mean /= static_cast<double>(d);
  }
  double sq = 0.0;
#pragma omp simd reduction(+ : sq)
  for (std::size_t j = 0; j < d; ++j) sq += (x[j] - mean) * (x[j] - mean);
  return {mean, 1.0 / std::sqrt(sq / static_cast<double>(d) + eps)};
}

// Double-precision versions of one row, for rows whose float statistics overflowed.
void layer_norm_row_in_double(const float* x, const float* g, const float* b, float* y, std::size_t d, double eps) {
  double mean = 0.0, var = 0.0;
  for (std::size_t j = 0; j < d; ++j) mean += x[j];
  mean /= static_cast<double>(d);
  for (std::size_t j = 0; j < d; ++j) var += (x[j] - mean) * (x[j] - mean);
  const double rstd = 1.0 / std::sqrt(var / static_cast<double>(d) + eps);
  for (std::size_t j = 0; j < d; ++j) y[j] = static_cast<float>(g[j] * (x[j] - mean) * rstd + b[j]);
}

void rms_norm_row_in_double(const float* x, const float* g, float* y, std::size_t d, double eps) {
  double ms = 0.0;
  for (std::size_t j = 0; j < d; ++j) ms += static_cast<double>(x[j]) * x[j];
  const double r = std::sqrt(ms / static_cast<double>(d) + eps);
  for (std::size_t j = 0; j < d; ++j) y[j] = static_cast<float>(g[j] * x[j] / r);
}

// Rows whose float statistics are not finite hold a NaN/inf (bad input: throw, naming the
// element) or values whose squares overflow float (|x| > 1.8e19: valid, redo in double).
// Flagged inside the parallel pass, handled here: no exception may leave an OpenMP region.
template <class Redo>
void redo_flagged_rows(const char* fn, const Tensor2& x, const std::vector<unsigned char>& flagged, Redo redo) {
  for (std::size_t t = 0; t < flagged.size(); ++t) {
    if (!flagged[t]) continue;
    for (std::size_t j = 0; j < x.shape()[1]; ++j)
      if (!std::isfinite(x(t, j))) fail(fn, "x has a non-finite value (", x(t, j), ") at (", t, ", ", j, ")");
    redo(t);
  }
}

// 1/r, or 0 when the float sum of squares is too small to trust (the caller redoes the row).
float rms_rstd(const float* x, std::size_t d, double eps) {
  float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
  for (std::size_t j = 0; j < d; ++j) sq += x[j] * x[j];
  if (sq < kTinySumOfSquares) return 0.0f;
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(sq) / static_cast<double>(d) + eps));
}

}  // namespace

Tensor2 layer_norm(const Tensor2& x, const Tensor1& gamma, const Tensor1& beta, double eps) {
  Tensor2 y;
  layer_norm_into(x, gamma, beta, eps, y);
  return y;
}

void layer_norm_into(const Tensor2& x, const Tensor1& gamma, const Tensor1& beta, double eps, Tensor2& y) {
  // x is checked for NaN/inf inside the statistics pass below, not by a separate scan.
  validate_norm("layer_norm", NormKind::layer_norm, x, gamma, &beta, nullptr, eps, /*check_x_values=*/false);
  const std::size_t rows = x.shape()[0], d = x.shape()[1];
  if (y.shape() != x.shape()) y.resize({rows, d});
  const float* g = gamma.data();
  const float* b = beta.data();
  std::vector<unsigned char> flagged(rows, 0);
#pragma omp parallel for schedule(static) if (worth_threading(rows, d))
  for (std::ptrdiff_t t = 0; t < static_cast<std::ptrdiff_t>(rows); ++t) {
    const float* xr = x.data() + static_cast<std::size_t>(t) * d;
    float* yr = y.data() + static_cast<std::size_t>(t) * d;
    const RowStats s = layer_norm_stats(xr, d, eps);
    if (!std::isfinite(s.offset) || !std::isfinite(s.rstd) || s.rstd == 0.0f || s.sum_sq < kTinySumOfSquares) {
      flagged[static_cast<std::size_t>(t)] = 1;
      continue;
    }
    // Fused: y = gamma * (x - mean) * rstd + beta in one pass, x - mean as (x - shift) - offset:
    // never the float mean itself, whose rounding (u |mean|) would shift every output.
#pragma omp simd
    for (std::size_t j = 0; j < d; ++j) yr[j] = g[j] * (((xr[j] - s.shift) - s.offset) * s.rstd) + b[j];
  }
  redo_flagged_rows("layer_norm", x, flagged, [&](std::size_t t) {
    layer_norm_row_in_double(x.data() + t * d, g, b, y.data() + t * d, d, eps);
  });
}

LayerNormGrads layer_norm_backward(const Tensor2& x, const Tensor1& gamma, const Tensor2& dy, double eps) {
  validate_norm("layer_norm_backward", NormKind::layer_norm, x, gamma, nullptr, &dy, eps);
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
      const RowStatsDouble st = row_stats_double(xr, d, eps, /*centred=*/true);
      const auto mean = static_cast<float>(st.mean), rstd = static_cast<float>(st.rstd);
      double sum_g = 0.0, sum_gx = 0.0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
      for (std::size_t j = 0; j < d; ++j) {
        xhat[j] = (xr[j] - mean) * rstd;
        const float gj = g[j] * dyr[j];
        sum_g += gj;
        sum_gx += gj * xhat[j];
        dgamma[j] += dyr[j] * xhat[j];
        dbeta[j] += dyr[j];
      }
      const auto mean_g = static_cast<float>(sum_g / static_cast<double>(d));
      const auto mean_gx = static_cast<float>(sum_gx / static_cast<double>(d));
#pragma omp simd
      for (std::size_t j = 0; j < d; ++j) dxr[j] = rstd * (g[j] * dyr[j] - mean_g - xhat[j] * mean_gx);
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
  Tensor2 y;
  rms_norm_into(x, gamma, eps, y);
  return y;
}

void rms_norm_into(const Tensor2& x, const Tensor1& gamma, double eps, Tensor2& y) {
  // x is checked for NaN/inf inside the sum-of-squares pass below, not by a separate scan.
  validate_norm("rms_norm", NormKind::rms_norm, x, gamma, nullptr, nullptr, eps, /*check_x_values=*/false);
  const std::size_t rows = x.shape()[0], d = x.shape()[1];
  if (y.shape() != x.shape()) y.resize({rows, d});
  const float* g = gamma.data();
  std::vector<unsigned char> flagged(rows, 0);
#pragma omp parallel for schedule(static) if (worth_threading(rows, d))
  for (std::ptrdiff_t t = 0; t < static_cast<std::ptrdiff_t>(rows); ++t) {
    const float* xr = x.data() + static_cast<std::size_t>(t) * d;
    float* yr = y.data() + static_cast<std::size_t>(t) * d;
    const float rstd = rms_rstd(xr, d, eps);
    if (!std::isfinite(rstd) || rstd == 0.0f) {
      flagged[static_cast<std::size_t>(t)] = 1;
      continue;
    }
#pragma omp simd
    for (std::size_t j = 0; j < d; ++j) yr[j] = g[j] * (xr[j] * rstd);
  }
  redo_flagged_rows("rms_norm", x, flagged, [&](std::size_t t) {
    rms_norm_row_in_double(x.data() + t * d, g, y.data() + t * d, d, eps);
  });
}

RmsNormGrads rms_norm_backward(const Tensor2& x, const Tensor1& gamma, const Tensor2& dy, double eps) {
  validate_norm("rms_norm_backward", NormKind::rms_norm, x, gamma, nullptr, &dy, eps);
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
      const auto rstd = static_cast<float>(row_stats_double(xr, d, eps, /*centred=*/false).rstd);
      double sum_gx = 0.0;
#pragma omp simd reduction(+ : sum_gx)
      for (std::size_t j = 0; j < d; ++j) {
        const float xhat = xr[j] * rstd;
        sum_gx += g[j] * dyr[j] * xhat;
        dgamma[j] += dyr[j] * xhat;
      }
      const auto mean_gx = static_cast<float>(sum_gx / static_cast<double>(d));
#pragma omp simd
      for (std::size_t j = 0; j < d; ++j) dxr[j] = rstd * (g[j] * dyr[j] - xr[j] * rstd * mean_gx);
    }
#pragma omp critical
    for (std::size_t j = 0; j < d; ++j) out.dgamma(j) += dgamma[j];
  }
  return out;
}

}  // namespace tvlab::opt
