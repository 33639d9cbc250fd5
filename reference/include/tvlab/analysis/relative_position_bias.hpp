#pragma once
/// @file
/// T5's bucketed relative position bias (Raffel et al., 2020), fed to attention through the
/// additive bias of `AttentionMask` (chapter 02). An experiment of the lesson built on the
/// reference's attention (tvlab::analysis), not a kernel with optimized and CUDA versions.

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::analysis {

/// @ingroup ch02
/// The bucket of the relative position \f$ r = j - i' \f$ (key position minus query position), as T5
/// defines it. With `bidirectional` (encoders) the buckets are halved, \f$ B = \text{num\_buckets}/2 \f$,
/// keys after the query (\f$ r > 0 \f$) take the upper half (offset \f$ B \f$) and \f$ n = |r| \f$;
/// otherwise (decoders) \f$ B = \text{num\_buckets} \f$ and \f$ n = \max(-r, 0) \f$, so every later key
/// shares bucket 0 with the query itself. With \f$ E = \lfloor B/2 \rfloor \f$ exact buckets:
/// \f[ \text{bucket}(n) = \begin{cases} n & n < E, \\ \min\!\left(B - 1,\ E + \left\lfloor \dfrac{\ln(n/E)}{\ln(\text{max\_distance}/E)}\,(B - E) \right\rfloor\right) & n \ge E
///     \end{cases} \f]
/// half the buckets hold one distance each, the other half cover \f$ [E, \text{max\_distance}) \f$ on a
/// logarithmic scale, and every distance \f$ \ge \text{max\_distance} \f$ shares the last bucket.
/// Throws `tvlab::Error` for num_buckets < 2 (< 4 when bidirectional: each half needs an exact
/// bucket) and max_distance <= E.
long long t5_relative_position_bucket(long long relative_position, bool bidirectional, int num_buckets,
                                      int max_distance);

/// @ingroup ch02
/// T5's bias `[heads, seq_q, seq_k]`: \f$ b_{hij} = T[\text{bucket}(j - i'),\ h] \f$ from a learned table
/// \f$ T \f$ `[num_buckets, heads]` (Hugging Face's `relative_attention_bias` embedding), with
/// \f$ i' = i + \text{seq\_k} - \text{seq\_q} \f$: the queries are the last seq_q positions, as with a
/// KV cache. Every layer of T5 reuses the first layer's bias.
/// Throws `tvlab::Error` for seq_q or seq_k <= 0, a non-finite table entry, and as
/// `t5_relative_position_bucket` (num_buckets is the table's row count).
Tensor3 t5_relative_position_bias(const Tensor2& table, long long seq_q, long long seq_k, bool bidirectional,
                                  int max_distance);

/// @ingroup ch02
/// Attention with a per-head additive bias `[heads, seq_q, seq_k]` (T5's, or any other):
/// \f$ \mathrm{softmax}(\text{scale}\; q_h k_h^\top + b_h + \ldots)\,v_h \f$ for each head \f$ h \f$, through
/// `ref::scaled_dot_product_attention` one head at a time with `cfg.mask.bias` set to that head's
/// `[seq_q, seq_k]` slice (added to a bias `cfg` already holds): the mask's bias is shared by
/// all heads. T5 itself uses scale 1 (its initialisation absorbs \f$ 1/\sqrt{d_k} \f$): set `cfg.scale`.
/// @param q `[heads, seq_q, head_dim]`, @param k `[heads, seq_k, head_dim]`, @param v `[heads, seq_k, head_dim_v]`
/// @return `[heads, seq_q, head_dim_v]`
/// Throws `tvlab::Error` for a bias of another shape or with NaN or \f$ +\infty \f$, and as attention.
Tensor3 attention_with_head_bias(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor3& bias,
                                 const AttentionConfig& cfg = {});

}  // namespace tvlab::analysis
