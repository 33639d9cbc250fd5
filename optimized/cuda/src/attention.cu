// CUDA kernels of chapter 00: masked row softmax, and attention as cuBLAS batched SGEMMs
// around it. No xtensor here; the host-tensor wrappers are in attention_host.cpp.

#include "check.cuh"
#include "tvlab/cuda/attention_device.hpp"

namespace tvlab::cuda::device {
namespace {

constexpr int kThreads = 256;

// One block per row of `rows` = heads * seq_q. Each thread strides over the columns.
// Mask rule as AttentionMask::allows() with the bottom-right alignment (cuda::kAttentionMaskSupport):
// causal forbids j > i + (seq_k - seq_q); mask[i, j] == 0 forbids; additive_mask[i, j] (the mask's
// bias) is added first. A fully masked row becomes zeros.
// ALiBi (chapter 02): slopes[h] != nullptr adds -m_h |i' - j| with i' = i + cols - seq_q.
__global__ void masked_softmax_kernel(float* x, int seq_q, int cols, bool causal, const unsigned char* mask,
                                      const float* additive, const float* slopes) {
  __shared__ float scratch[32];
  const long long row_index = blockIdx.x;
  const int i = static_cast<int>(row_index % seq_q);  // query position inside its head
  const float slope = slopes ? slopes[row_index / seq_q] : 0.0f;
  float* row = x + row_index * cols;

  // Pass 1: apply the mask and biases, and find the row maximum.
  float m = -INFINITY;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    float s = row[j];
    if (additive) s += additive[static_cast<long long>(i) * cols + j];
    if (slopes) s -= slope * fabsf(static_cast<float>(i + cols - seq_q - j));
    const bool allowed = !(causal && j + seq_q > i + cols) && !(mask && !mask[static_cast<long long>(i) * cols + j]);
    s = allowed ? s : -INFINITY;
    row[j] = s;
    m = fmaxf(m, s);
  }
  m = tvlab::cuda::detail::block_max(m, scratch);
  if (m == -INFINITY) {
    for (int j = threadIdx.x; j < cols; j += blockDim.x) row[j] = 0.0f;
    return;
  }
  // Pass 2: exponentials and their sum.
  float l = 0.0f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const float e = __expf(row[j] - m);
    row[j] = e;
    l += e;
  }
  l = tvlab::cuda::detail::block_sum<float>(l, scratch);
  // Pass 3: normalise.
  const float inv_l = 1.0f / l;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) row[j] *= inv_l;
}

}  // namespace

void softmax_rows(float* x, std::size_t rows, std::size_t cols) {
  if (rows == 0 || cols == 0) return;
  masked_softmax_kernel<<<static_cast<unsigned>(rows), kThreads>>>(x, static_cast<int>(rows), static_cast<int>(cols),
                                                                   false, nullptr, nullptr, nullptr);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

// Row-major C[m, n] = A[m, k] op(B): cuBLAS is column-major, and a row-major matrix is its
// transpose in column-major, so compute C^T = op(B)^T A^T with the operands swapped.
void sgemm(std::size_t m, std::size_t n, std::size_t k, const float* a, const float* b, bool transpose_b, float* c,
           float beta) {
  const float one = 1.0f;
  TVLAB_CUBLAS_CHECK(cublasSgemm(tvlab::cuda::detail::cublas_handle(), transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &one, b,
                                 static_cast<int>(transpose_b ? k : n), a, static_cast<int>(k), &beta, c,
                                 static_cast<int>(n)));
}

void scaled_dot_product_attention(const AttentionArgs& p) {
  cublasHandle_t handle = tvlab::cuda::detail::cublas_handle();
  const int sq = static_cast<int>(p.seq_q), sk = static_cast<int>(p.seq_k);
  const int d = static_cast<int>(p.head_dim), dv = static_cast<int>(p.head_dim_v);
  const int batch = static_cast<int>(p.heads);
  const float zero = 0.0f, one = 1.0f;
  // S_h = scale * Q_h K_h^T for every head h: column-major S^T = K Q^T.
  TVLAB_CUBLAS_CHECK(cublasSgemmStridedBatched(handle, CUBLAS_OP_T, CUBLAS_OP_N, sk, sq, d, &p.scale, p.k, d,
                                               static_cast<long long>(sk) * d, p.q, d, static_cast<long long>(sq) * d,
                                               &zero, p.scores, sk, static_cast<long long>(sq) * sk, batch));
  masked_softmax_kernel<<<static_cast<unsigned>(p.heads * p.seq_q), kThreads>>>(p.scores, sq, sk, p.causal, p.mask,
                                                                                p.additive_mask, p.alibi_slopes);
  TVLAB_CUDA_CHECK(cudaGetLastError());
  // O_h = P_h V_h: column-major O^T = V^T P^T.
  TVLAB_CUBLAS_CHECK(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, dv, sq, sk, &one, p.v, dv,
                                               static_cast<long long>(sk) * dv, p.scores, sk,
                                               static_cast<long long>(sq) * sk, &zero, p.out, dv,
                                               static_cast<long long>(sq) * dv, batch));
}

}  // namespace tvlab::cuda::device
