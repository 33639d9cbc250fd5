#pragma once
/// @file
/// Chapter 05, the reference: grouped-query attention (GQA, Ainslie et al. 2023), with multi-head
/// (\f$ g = h \f$) and multi-query attention (\f$ g = 1 \f$, Shazeer 2019) as its two ends, in plain
/// loops with double accumulation. The attention math is chapter 00's
/// (`tvlab/ref/attention.hpp`); the one change is which key/value head a query head reads.

#include <cstddef>
#include <optional>

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/kv_heads.hpp"
#include "tvlab/core/rope_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// The parts of `AttentionConfig::mask` the reference's grouped attention implements: all of them.
inline constexpr MaskSupport kGroupedAttentionMaskSupport = kFullMaskSupport;

/// @ingroup ch05
/// Scaled dot-product attention where \f$ h \f$ query heads share \f$ g \f$ key/value heads:
/// \f[ o_{ti} = \sum_j \mathrm{softmax}_j\!\big(\text{scale}\; q_{ti} \cdot k_{\kappa(t) j} + B_{tij}\big)\, v_{\kappa(t) j},
///     \qquad \kappa(t) = \lfloor t / (h/g) \rfloor, \f]
/// with \f$ B \f$ what `cfg.mask` adds (\f$ -\infty \f$ where `allows(i, j)` is false, else
/// `score_bias(t, i, j)`, ALiBi's slope indexed by the query head \f$ t \f$), as in chapter 00's
/// `scaled_dot_product_attention`; a fully masked row gives 0. Equal to that function with each kv
/// head repeated \f$ h/g \f$ times (Hugging Face's `repeat_kv`), without making the copies.
/// @param q `[num_heads, seq_q, head_dim]`
/// @param k `[num_kv_heads, seq_k, head_dim]`; num_kv_heads divides num_heads
/// @param v `[num_kv_heads, seq_k, head_dim_v]`
/// @param cfg the scale (default \f$ 1/\sqrt{d_k} \f$) and the mask
/// @return `[num_heads, seq_q, head_dim_v]`
Tensor3 grouped_scaled_dot_product_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                             const AttentionConfig& cfg = {});

/// @ingroup ch05
/// The checks of grouped attention over the first `seq_k` rows of `k` and `v`, made by every
/// version (`ref::` and `opt::grouped_scaled_dot_product_attention`, the layers and the KV cache's
/// steps) so that all refuse the same inputs with the same message, naming `function`:
/// - q, k, v not empty; the heads of k (\f$ g \f$, `num_kv_heads`) divide those of q
///   (\f$ h \f$, `num_heads`), v has the \f$ g \f$ heads and the rows of k, k the head_dim of q;
/// - \f$ 1 \le \f$ `seq_k` \f$ \le \f$ the rows of k (the rows after it, a cache's free slots,
///   are neither checked nor read);
/// - every value of q, and of the first `seq_k` rows of k and v, finite;
/// - the mask for \f$ h \f$ heads, seq_q queries and seq_k keys (`validate_attention_mask`);
/// - the scale positive and a float, and
///   \f$ \text{scale}\cdot d_k \max|q| \max|k| \le 10^{38} \f$, so that no score leaves float's range.
/// @param function the caller's name, first in every message
/// @param q `[num_heads, seq_q, head_dim]`
/// @param k `[num_kv_heads, rows, head_dim]`
/// @param v `[num_kv_heads, rows, head_dim_v]`
/// @param seq_k how many rows of k and v are keys and values
/// @param scale the scale asked for, or none for \f$ 1/\sqrt{d_k} \f$
/// @param mask the mask, for seq_q queries and seq_k keys
/// @return the scale the scores use
double validate_grouped_attention(const char* function, const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                  std::size_t seq_k, const std::optional<double>& scale, const AttentionMask& mask);

/// @ingroup ch05
/// A grouped-query attention layer, from the input projections to the output projection:
/// \f[ Q^{(t)} = X_q W_q^{(t)}, \quad K^{(j)} = X_{kv} W_k^{(j)}, \quad V^{(j)} = X_{kv} W_v^{(j)}, \f]
/// \f[ \mathrm{GQA}(X_q, X_{kv}) = \mathrm{Concat}_t\big(\mathrm{Attention}(Q^{(t)}, K^{(\kappa(t))}, V^{(\kappa(t))})\big)\, W_o, \f]
/// \f$ t = 0 \dots h-1 \f$, \f$ j = 0 \dots g-1 \f$, \f$ \kappa(t) = \lfloor t/(h/g) \rfloor \f$
/// (the document 004's \f$ Q_{i,j} = X W^Q_{i,j},\ K_i = X W^K_i,\ V_i = X W^V_i \f$ for group
/// \f$ i \f$ and head \f$ j \f$ in it). With \f$ g = h \f$ it is chapter 00's
/// `multi_head_attention` with the same weights; with \f$ g = 1 \f$, MQA. Self-attention passes the
/// same tokens twice.
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

/// @ingroup ch05
/// The checks `grouped_query_attention` makes before its projections, shared by the reference and
/// the optimized layer (the same inputs refused with the same message, naming `function`): the
/// weights against `heads` (`validate_gqa_weights`), x_q and x_kv not empty, of d_model columns and
/// finite, `cfg` for \f$ h \f$ heads over those sequences (`validate_attention_config`), and `rope`
/// (`validate_attention_rope`). The projected q, k and v are checked after the projections, by
/// `validate_grouped_attention` (a finite x can still project beyond float's range).
/// @return d_model and head_dim, read off the weights
GqaShape validate_grouped_query_attention(const char* function, const Tensor2& x_q, const Tensor2& x_kv,
                                          const GqaWeights& weights, const KvHeads& heads, const AttentionConfig& cfg,
                                          const std::optional<AttentionRope>& rope);

}  // namespace tvlab::ref
