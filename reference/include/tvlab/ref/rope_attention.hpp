#pragma once
/// @file
/// Attention with rotary position embeddings (chapter 02): RoPE rotates q and k, then chapter
/// 00's attention runs on the rotated vectors. RoPE lives outside attention because models rotate
/// differently (MLA rotates a part of each head only).

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/rope_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch02
/// \f$ \mathrm{Attention}(R_{p_q} Q, R_{p_k} K, V) \f$: query i rotated at position
/// \f$ p_0 + (n_k - n_q) + i \f$ and key j at \f$ p_0 + j \f$ (`ref::apply_rope`), then
/// `ref::scaled_dot_product_attention(q', k', v, cfg)`, so the score of query i and key j depends
/// on their distance only. Shapes as `scaled_dot_product_attention`; the mask as there
/// (`kAttentionMaskSupport`). Throws `tvlab::Error` naming the parameter, for RoPE
/// (`validate_attention_rope`) as for attention.
Tensor3 rope_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionRope& rope,
                       const AttentionConfig& cfg = {});

}  // namespace tvlab::ref
