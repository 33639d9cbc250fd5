#pragma once
/// @file
/// Device-pointer entry points of chapter 00 (softmax, attention). No xtensor here: these are
/// what the `.cu` files implement and what the CUDA benchmarks call directly.

#include <cstddef>

namespace tvlab::cuda::device {

/// Row-wise stable softmax in place on `x` `[rows, cols]` (device memory); one block per row.
void softmax_rows(float* x, std::size_t rows, std::size_t cols);

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

/// cuBLAS strided-batched SGEMM for \f$ S = \text{scale}\,QK^\top \f$, a masked softmax kernel,
/// and a second batched SGEMM for \f$ O = PV \f$.
void scaled_dot_product_attention(const AttentionArgs& args);

/// Row-major C[m, n] = A[m, k] * op(B) (+ beta C) with cuBLAS; op(B) = B `[k, n]` or, when
/// `transpose_b`, B stored `[n, k]`.
void sgemm(std::size_t m, std::size_t n, std::size_t k, const float* a, const float* b, bool transpose_b,
           float* c, float beta = 0.0f);

}  // namespace tvlab::cuda::device
