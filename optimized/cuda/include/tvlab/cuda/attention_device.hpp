#pragma once
/// @file
/// Device-pointer entry point of chapter 00's attention (no xtensor here): what attention.cu
/// implements and what the CUDA benchmarks call directly. The row softmax is in
/// `softmax_device.hpp`, SGEMM in `blas.hpp`.

#include <cstddef>

namespace tvlab::cuda::device {

/// Arguments of device scaled dot-product attention. All pointers are device memory.
struct AttentionArgs {
  const float* q = nullptr;            ///< [heads, seq_q, head_dim]
  const float* k = nullptr;            ///< [heads, seq_k, head_dim]
  const float* v = nullptr;            ///< [heads, seq_k, head_dim_v]
  float* out = nullptr;                ///< [heads, seq_q, head_dim_v]
  float* scores = nullptr;             ///< workspace [heads, seq_q, seq_k]
  const unsigned char* mask = nullptr; ///< optional [seq_q, seq_k], 1 = may attend (AttentionMask::allowed)
  const float* additive_mask = nullptr;///< optional [seq_q, seq_k] (AttentionMask::bias)
  const float* alibi_slopes = nullptr; ///< optional [heads]: adds -m_h |i + seq_k - seq_q - j| (chapter 02)
  std::size_t heads = 0, seq_q = 0, seq_k = 0, head_dim = 0, head_dim_v = 0;
  float scale = 1.0f;
  bool causal = false;
};

/// cuBLAS strided-batched SGEMM for \f$ S = \text{scale}\,QK^\top \f$, the masked softmax
/// kernel (`masked_softmax_rows`), and a second batched SGEMM for \f$ O = PV \f$.
void scaled_dot_product_attention(const AttentionArgs& args);

}  // namespace tvlab::cuda::device
