#pragma once
/// @file
/// CUDA attention (chapter 00), host tensors in and out: cuBLAS batched SGEMMs and a masked
/// softmax kernel. Must match `tvlab::ref::scaled_dot_product_attention` / `multi_head_attention`.

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::cuda {

/// The parts of `AttentionConfig::mask` the masked softmax kernel implements: causal, the boolean
/// mask, the bias and ALiBi, with the bottom-right alignment only (the kernel places query i at
/// \f$ i + n_k - n_q \f$); no sliding window.
inline constexpr MaskSupport kAttentionMaskSupport{.causal = true, .allowed = true, .bias = true, .alibi = true};

/// @ingroup ch00
/// Same contract as `ref::scaled_dot_product_attention` for the mask parts of
/// `kAttentionMaskSupport`; the others throw `tvlab::Error` naming them.
Tensor3 scaled_dot_product_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                     const AttentionConfig& cfg = {});

/// @ingroup ch00
Tensor2 multi_head_attention(const Tensor2& x_q, const Tensor2& x_kv, const MhaWeights& weights,
                             int num_heads, const AttentionConfig& cfg = {});

}  // namespace tvlab::cuda
