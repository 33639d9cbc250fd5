#pragma once
/// @file
/// Scaled dot-product attention and multi-head attention (chapter 00), written as loops.

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// The parts of `AttentionConfig::mask` the reference implements: all of them, each through
/// `AttentionMask::allows` and `AttentionMask::score_bias`.
inline constexpr MaskSupport kAttentionMaskSupport = kFullMaskSupport;

/// @ingroup ch00
/// \f$ \mathrm{Attention}(Q,K,V) = \mathrm{softmax}\!\left(\dfrac{QK^\top}{\sqrt{d_k}} + B\right) V \f$
/// per head, where \f$ B \f$ is what `cfg.mask` adds: \f$ -\infty \f$ where `allows(i, j)` is
/// false, else `score_bias(h, i, j)` (the bias and ALiBi).
/// @param q `[heads, seq_q, head_dim]`
/// @param k `[heads, seq_k, head_dim]`
/// @param v `[heads, seq_k, head_dim_v]`
/// @return `[heads, seq_q, head_dim_v]`
Tensor3 scaled_dot_product_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                     const AttentionConfig& cfg = {});

/// @ingroup ch00
/// Multi-head attention: \f$ \mathrm{MHA}(X_q, X_{kv}) = \mathrm{Concat}(\text{head}_1..\text{head}_h) W_o \f$,
/// \f$ \text{head}_i = \mathrm{Attention}(X_q W_q^{(i)}, X_{kv} W_k^{(i)}, X_{kv} W_v^{(i)}) \f$,
/// where \f$ W^{(i)} \f$ are columns \f$ [i d_k, (i+1) d_k) \f$ of the projection.
/// Self-attention passes the same tokens twice.
/// @param x_q `[seq_q, d_model]`, @param x_kv `[seq_k, d_model]`
/// @return `[seq_q, d_model]`
Tensor2 multi_head_attention(const Tensor2& x_q, const Tensor2& x_kv, const MhaWeights& weights,
                             int num_heads, const AttentionConfig& cfg = {});

}  // namespace tvlab::ref
