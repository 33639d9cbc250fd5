#pragma once
/// @file
/// Chapter 05, grouped-query attention on the CPU: the prefill attention of \f$ h \f$ query heads
/// over \f$ g \f$ shared key/value heads, and the whole GQA layer. Must match
/// `tvlab::ref::grouped_scaled_dot_product_attention` and `ref::grouped_query_attention`; the checks
/// are the reference's own (`ref::validate_grouped_attention`, `ref::validate_grouped_query_attention`),
/// so both refuse the same inputs with the same messages.

#include <optional>

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/kv_heads.hpp"
#include "tvlab/core/rope_config.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/opt/attention.hpp"

namespace tvlab::opt {

/// The parts of `AttentionConfig::mask` the grouped attention implements: those of chapter 00's
/// version 2, which it runs (`opt::kAttentionMaskSupport`: every part, the causal rule and the
/// window as a key range per row, the bias and ALiBi added in float, the boolean mask). A part
/// outside it would be refused by name (`require_supported`).
inline constexpr MaskSupport kGroupedAttentionMaskSupport = kAttentionMaskSupport;

/// @ingroup ch05
/// Grouped scaled dot-product attention,
/// \f$ o_{ti} = \sum_j \mathrm{softmax}_j(\text{scale}\; q_{ti} \cdot k_{\kappa(t) j} + B_{tij})\, v_{\kappa(t) j} \f$
/// with \f$ \kappa(t) = \lfloor t/(h/g) \rfloor \f$, computed as chapter 00's version 2
/// (`opt::scaled_dot_product_attention_v2`): per query head, \f$ S = \text{scale}\,Q K^\top \f$ as
/// one SGEMM, the mask in place, the softmax per row, \f$ O = P V \f$ as a second SGEMM, threads over
/// the query heads. The \f$ h/g \f$ query heads of a group read their kv head's k and v in place
/// (Hugging Face's `repeat_kv` copies them; here nothing is copied). The scores still cost
/// \f$ 4 n_q n_k d \f$ flops per query head, as in multi-head attention: what GQA saves is the
/// keys and values stored and read, which matters when decoding, not the prefill's arithmetic.
/// @param q `[num_heads, seq_q, head_dim]`
/// @param k `[num_kv_heads, seq_k, head_dim]`; num_kv_heads divides num_heads
/// @param v `[num_kv_heads, seq_k, head_dim_v]`
/// @param cfg the scale (default \f$ 1/\sqrt{d_k} \f$) and the mask (`kGroupedAttentionMaskSupport`)
/// @return `[num_heads, seq_q, head_dim_v]`
Tensor3 grouped_scaled_dot_product_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                             const AttentionConfig& cfg = {});

/// @ingroup ch05
/// The grouped-query attention layer: the projections \f$ X_q W_q \f$, \f$ X_{kv} W_k \f$,
/// \f$ X_{kv} W_v \f$ each as one SGEMM (then split into heads), RoPE by `opt::apply_rope` at the
/// reference's positions (query \f$ i \f$ at \f$ p_0 + n_k - n_q + i \f$, key \f$ j \f$ at
/// \f$ p_0 + j \f$), `grouped_scaled_dot_product_attention`, and \f$ \mathrm{Concat}_t(O_t)\, W_o \f$
/// as one SGEMM. Same contract as `ref::grouped_query_attention`.
/// @param x_q `[seq_q, d_model]`
/// @param x_kv `[seq_k, d_model]`
/// @param weights the projections (`GqaWeights`)
/// @param heads \f$ h \f$ and \f$ g \f$
/// @param cfg the scale and the mask, as for `grouped_scaled_dot_product_attention`
/// @param rope rotary position embeddings of the queries and keys, or none
/// @return `[seq_q, d_model]`
Tensor2 grouped_query_attention(const Tensor2& x_q, const Tensor2& x_kv, const GqaWeights& weights,
                                const KvHeads& heads, const AttentionConfig& cfg = {},
                                const std::optional<AttentionRope>& rope = std::nullopt);

}  // namespace tvlab::opt
