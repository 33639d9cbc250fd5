#pragma once
/// @file
/// Device-pointer entry points of chapter 00's softmax (no xtensor here): the row softmax, and
/// the masked softmax of attention scores that `device::scaled_dot_product_attention` runs
/// between its two products. One kernel does both (softmax.cu).

#include <cstddef>

namespace tvlab::cuda::device {

/// Row-wise stable softmax in place on `x` `[rows, cols]` (device memory); one block per row.
void softmax_rows(float* x, std::size_t rows, std::size_t cols);

/// Attention scores to normalise in place, and the mask to apply first. All pointers are device memory.
struct MaskedSoftmaxArgs {
  float* scores = nullptr;              ///< [heads, seq_q, seq_k]
  const unsigned char* mask = nullptr;  ///< optional [seq_q, seq_k], 1 = may attend (AttentionMask::allowed)
  const float* additive_mask = nullptr; ///< optional [seq_q, seq_k], added first (AttentionMask::bias)
  const float* alibi_slopes = nullptr;  ///< optional [heads]: adds -m_h |i + seq_k - seq_q - j| (chapter 02)
  std::size_t heads = 0, seq_q = 0, seq_k = 0;
  bool causal = false;                  ///< key j hidden from query i when j > i + seq_k - seq_q
};

/// One block per score row: biases added, masked scores set to -inf, then a stable softmax
/// (block-wide max and sum by warp shuffles). A fully masked row becomes zeros.
void masked_softmax_rows(const MaskedSoftmaxArgs& args);

}  // namespace tvlab::cuda::device
