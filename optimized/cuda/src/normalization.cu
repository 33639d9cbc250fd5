// CUDA kernels of chapter 01's LayerNorm and RMSNorm, forward and backward. No xtensor here; the
// host-tensor wrappers are in normalization_host.cpp.

#include "check.cuh"
#include "tvlab/cuda/normalization_device.hpp"

namespace tvlab::cuda::device {
namespace {

using tvlab::cuda::detail::block_sum;
constexpr int kThreads = 256;

// The statistics of row xr, by block reductions over its cols values: mean (LayerNorm; 0 for
// RMSNorm) and rstd = 1/sigma. The same shifted, corrected two-pass method as the CPU's
// (optimized/src/normalization.cpp, layer_norm_stats): with k = x_0, o = sum (x_j - k) / n, then
// S = sum c_j^2 and e = sum c_j / n for c_j = (x_j - k) - o, var = S / n - e^2 and mean = k + o + e,
// so the rounding errors scale with the row's spread, not its mean. The sums are accumulated in
// double: the kernels are memory-bound, so this costs nothing, and squares of |x| > 1.8e19 cannot
// overflow. Every thread gets both.
struct RowStats {
  double mean, rstd;
};

template <bool kLayerNorm>
__device__ RowStats row_stats(const float* xr, int cols, double eps, double* scratch) {
  if (!kLayerNorm) {
    double sq = 0.0;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) sq += static_cast<double>(xr[j]) * xr[j];
    return {0.0, rsqrt(block_sum(sq, scratch) / cols + eps)};
  }
  const double shift = xr[0];
  double s = 0.0;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) s += xr[j] - shift;
  const double o = block_sum(s, scratch) / cols;
  double sq = 0.0, residual = 0.0;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const double c = (xr[j] - shift) - o;
    sq += c * c;
    residual += c;
  }
  const double e = block_sum(residual, scratch) / cols;
  const double var = fmax(block_sum(sq, scratch) / cols - e * e, 0.0);
  return {shift + (o + e), rsqrt(var + eps)};
}

// One block per row: the row's statistics, then y = gamma * (x - mean) * rstd (+ beta) in the
// same kernel.
template <bool kLayerNorm>
__global__ void norm_forward_kernel(const float* x, const float* gamma, const float* beta, float* y, int cols,
                                    double eps) {
  __shared__ double scratch[32];
  const float* xr = x + static_cast<long long>(blockIdx.x) * cols;
  float* yr = y + static_cast<long long>(blockIdx.x) * cols;
  const auto [mean, rstd] = row_stats<kLayerNorm>(xr, cols, eps, scratch);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const double v = gamma[j] * ((xr[j] - mean) * rstd);
    yr[j] = static_cast<float>(kLayerNorm ? v + beta[j] : v);
  }
}

// dx per row: g = gamma * dy, dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); RMSNorm drops
// the mean(g) term and has mean = 0. Also stores (mean, rstd) for the column kernel.
template <bool kLayerNorm>
__global__ void norm_backward_rows_kernel(const float* x, const float* gamma, const float* dy, float* dx,
                                          float* stats, int cols, double eps) {
  __shared__ double scratch[32];
  const long long offset = static_cast<long long>(blockIdx.x) * cols;
  const float *xr = x + offset, *dyr = dy + offset;
  float* dxr = dx + offset;
  const auto [mean, rstd] = row_stats<kLayerNorm>(xr, cols, eps, scratch);
  double sum_g = 0.0, sum_gx = 0.0;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const double g = static_cast<double>(gamma[j]) * dyr[j];
    sum_g += g;
    sum_gx += g * (xr[j] - mean) * rstd;
  }
  const double mean_g = kLayerNorm ? block_sum(sum_g, scratch) / cols : 0.0;
  const double mean_gx = block_sum(sum_gx, scratch) / cols;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const double xhat = (xr[j] - mean) * rstd;
    dxr[j] = static_cast<float>(rstd * (static_cast<double>(gamma[j]) * dyr[j] - mean_g - xhat * mean_gx));
  }
  if (threadIdx.x == 0) {
    stats[2 * blockIdx.x] = static_cast<float>(mean);
    stats[2 * blockIdx.x + 1] = static_cast<float>(rstd);
  }
}

// dgamma_j = sum_t dy[t, j] xhat[t, j], dbeta_j = sum_t dy[t, j]: one thread per column.
__global__ void norm_backward_columns_kernel(const float* x, const float* dy, const float* stats, float* dgamma,
                                             float* dbeta, int rows, int cols) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  float dg = 0.0f, db = 0.0f;
  for (int t = 0; t < rows; ++t) {
    const long long idx = static_cast<long long>(t) * cols + j;
    dg += dy[idx] * (x[idx] - stats[2 * t]) * stats[2 * t + 1];
    db += dy[idx];
  }
  dgamma[j] = dg;
  if (dbeta) dbeta[j] = db;
}

template <bool kLayerNorm>
void backward(const NormBackwardArgs& a) {
  norm_backward_rows_kernel<kLayerNorm><<<static_cast<unsigned>(a.rows), kThreads>>>(
      a.x, a.gamma, a.dy, a.dx, a.stats, static_cast<int>(a.cols), a.eps);
  TVLAB_CUDA_CHECK(cudaGetLastError());
  const unsigned blocks = static_cast<unsigned>((a.cols + kThreads - 1) / kThreads);
  norm_backward_columns_kernel<<<blocks, kThreads>>>(a.x, a.dy, a.stats, a.dgamma, kLayerNorm ? a.dbeta : nullptr,
                                                      static_cast<int>(a.rows), static_cast<int>(a.cols));
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void layer_norm_forward(const NormArgs& a) {
  norm_forward_kernel<true><<<static_cast<unsigned>(a.rows), kThreads>>>(a.x, a.gamma, a.beta, a.y,
                                                                          static_cast<int>(a.cols), a.eps);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

void rms_norm_forward(const NormArgs& a) {
  norm_forward_kernel<false><<<static_cast<unsigned>(a.rows), kThreads>>>(a.x, a.gamma, nullptr, a.y,
                                                                           static_cast<int>(a.cols), a.eps);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

void layer_norm_backward(const NormBackwardArgs& a) { backward<true>(a); }
void rms_norm_backward(const NormBackwardArgs& a) { backward<false>(a); }

}  // namespace tvlab::cuda::device
