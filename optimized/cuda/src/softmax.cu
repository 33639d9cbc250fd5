// CUDA kernel of chapter 00's softmax: a stable row softmax with the attention mask applied
// first, used alone (`softmax_rows`) and between the two products of chapter 00's attention
// (attention.cu). No xtensor here; the host-tensor wrapper is in softmax_host.cpp.

#include "check.cuh"
#include "tvlab/cuda/softmax_device.hpp"

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

void masked_softmax_rows(const MaskedSoftmaxArgs& a) {
  const std::size_t rows = a.heads * a.seq_q;
  if (rows == 0 || a.seq_k == 0) return;
  masked_softmax_kernel<<<static_cast<unsigned>(rows), kThreads>>>(a.scores, static_cast<int>(a.seq_q),
                                                                   static_cast<int>(a.seq_k), a.causal, a.mask,
                                                                   a.additive_mask, a.alibi_slopes);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

// A plain softmax is the masked one with no mask: one "head" of `rows` queries.
void softmax_rows(float* x, std::size_t rows, std::size_t cols) {
  MaskedSoftmaxArgs a;
  a.scores = x;
  a.heads = 1;
  a.seq_q = rows;
  a.seq_k = cols;
  masked_softmax_rows(a);
}

}  // namespace tvlab::cuda::device
