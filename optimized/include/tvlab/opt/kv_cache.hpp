#pragma once
/// @file
/// Chapter 05 on the CPU: one grouped-query attention layer decoding with its KV cache. Must match
/// `tvlab::ref::prefill`, `ref::decode` and `ref::decode_without_cache`, whose cache type
/// (`ref::KvCache`, `[g, capacity, d_k]` keys and values) it reads and writes.
///
/// What differs from the reference is how each part runs, not what it computes:
/// - the four projections \f$ XW_q, XW_k, XW_v \f$ and \f$ \mathrm{Concat}(O)W_o \f$ are OpenBLAS
///   SGEMMs over all heads at once (`[t, d] x [d, h d_k]`), as chapter 00's `opt::multi_head_attention`;
/// - RoPE, when given, is chapter 02's `opt::apply_rope`;
/// - one new token (`decode`) attends through `opt::gqa_decode_attention`, the split-K
///   flash-decoding that reads each kv head's cached keys and values once for its \f$ h/g \f$ query
///   heads;
/// - several (`prefill`, `decode_without_cache`) attend head by head with two SGEMMs,
///   \f$ S = \text{scale}\,Q_i K_{\kappa(i)}^\top \f$ and \f$ O_i = P V_{\kappa(i)} \f$, reading
///   kv head \f$ \kappa(i) = \lfloor i/(h/g) \rfloor \f$ in place in the cache (never copied to
///   \f$ h \f$ heads), the causal mask as a key range per row.
///
/// The checks are the reference's, before the cache is written: a refused step leaves it as it was.
/// For that the largest cached key is read once per step (the bound on the scores needs it), as the
/// reference does.

#include <optional>

#include "tvlab/core/kv_heads.hpp"
#include "tvlab/core/rope_config.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/kv_cache.hpp"

namespace tvlab::opt {

using ref::DecodeOutput;
using ref::KvCache;

/// @ingroup ch05
/// `ref::prefill` with SGEMMs: \f$ t \f$ new tokens through the causal layer, their keys and values
/// appended to `cache`; query \f$ i \f$ (position \f$ n_0 + i \f$) attends to positions
/// \f$ 0 \dots n_0 + i \f$. Same arguments, result (up to float rounding), projection count and
/// errors as the reference.
/// @param cache the layer's cache; its heads and head_dim must be those of `weights`
/// @param x `[t, d_model]`, t >= 1
/// @param weights the layer's projections
/// @param heads \f$ h \f$ and \f$ g \f$
/// @param rope rotary position embeddings (chapter 02), or none
DecodeOutput prefill(KvCache& cache, const Tensor2& x, const GqaWeights& weights, const KvHeads& heads,
                     const std::optional<AttentionRope>& rope = std::nullopt);

/// @ingroup ch05
/// `ref::decode` with SGEMM projections and `opt::gqa_decode_attention` over the cache: one new
/// token, its key and value appended, attending over every cached position.
/// @param cache the layer's cache
/// @param x_token `[1, d_model]`
/// @param weights the layer's projections
/// @param heads \f$ h \f$ and \f$ g \f$
/// @param rope rotary position embeddings, as for `prefill`
DecodeOutput decode(KvCache& cache, const Tensor2& x_token, const GqaWeights& weights, const KvHeads& heads,
                    const std::optional<AttentionRope>& rope = std::nullopt);

/// @ingroup ch05
/// `ref::decode_without_cache` with SGEMMs: the last token's output with every token's key and
/// value projected again, \f$ 2 n\, d\, g\, d_k + 2 d\, h\, d_k \f$ projection multiply-adds.
/// @param x `[n, d_model]`, every token so far (the last one is the new token)
/// @param weights the layer's projections
/// @param heads \f$ h \f$ and \f$ g \f$
/// @param rope rotary position embeddings (token \f$ p \f$ at position \f$ p_0 + p \f$), or none
/// @return the last token's output `[1, d_model]`
DecodeOutput decode_without_cache(const Tensor2& x, const GqaWeights& weights, const KvHeads& heads,
                                  const std::optional<AttentionRope>& rope = std::nullopt);

}  // namespace tvlab::opt
