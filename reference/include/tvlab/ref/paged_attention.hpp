#pragma once
/// @file
/// Chapter 05, the reference of decode attention over a paged KV cache (vLLM's PagedAttention,
/// Kwon et al. 2023, Section 4.1): the query of the token being generated attends to the sequence's
/// keys and values where they lie, block by block through the block table, instead of in one
/// contiguous buffer. Block \f$ l \f$ of the table holds tokens \f$ [l b, (l + 1) b) \f$, so the
/// result equals attention over the gathered, contiguous keys and values
/// (`ref::scaled_dot_product_attention` over `gather_keys` and `gather_values`): pages change where
/// the numbers are, not what is computed.
///
/// Whatever the cache's storage (`PagedKvStorage`: fp32, bf16, INT8 or FP8 E4M3), the reference
/// reads each element as the pool holds it and dequantizes it in the loop (`PagedKvCache::key_at`:
/// \f$ \hat k = s\,q \f$ with the slot's scale for the quantized formats), then accumulates in
/// double: the result is attention over `gather_keys` and `gather_values`, the dequantized floats.
/// @ingroup ch05

#include <cstddef>
#include <optional>
#include <span>

#include "tvlab/core/paged_kv_cache.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/gqa_decode.hpp"

namespace tvlab::ref {

/// @ingroup ch05
/// One decode step of grouped-query attention over the first `context_len` tokens that
/// `block_table` maps in `cache`:
/// \f[ o_i = \sum_{t < n} \frac{e^{s_{it}}}{\sum_{t' < n} e^{s_{it'}}}\, v_{g(i), t}, \qquad
///     s_{it} = \text{scale}\; q_i \cdot k_{g(i), t}, \qquad g(i) = \lfloor i / (h / g) \rfloor, \f]
/// where \f$ k_{g,t} \f$ is `cache.key_at(T[t / b], g, t mod b, :)`, the key as the cache stores it
/// (dequantized for the narrow storages; \f$ v \f$ likewise):
/// query head \f$ i \f$ of \f$ h \f$ reads key/value head \f$ g(i) \f$ of the cache's \f$ g \f$
/// (\f$ g = h \f$ is MHA, \f$ g = 1 \f$ MQA). This is the kernel's form (vLLM's kernel takes a block
/// table and a context length per sequence); the table is checked against the cache
/// (`PagedKvCache::validate_block_table`).
/// @param q `[num_heads, head_dim]`: the new token's queries; num_heads a multiple of the cache's num_kv_heads
/// @param cache the pool the table points into
/// @param block_table physical blocks of logical blocks 0, 1, ... (at least \f$ \lceil n / b \rceil \f$, each in use)
/// @param context_len \f$ n \ge 1 \f$: the tokens to attend to
/// @param scale default \f$ 1/\sqrt{d_k} \f$
/// @return `[num_heads, head_dim]`
Tensor2 paged_decode_attention(const Tensor2& q, const PagedKvCache& cache, std::span<const std::size_t> block_table,
                               std::size_t context_len, std::optional<double> scale = {});

/// @ingroup ch05
/// The checks of the block-table form, shared by every version for `function`: q `[num_heads,
/// head_dim]` non-empty and finite with the cache's head_dim and num_heads a multiple of its
/// num_kv_heads, scale positive and finite, and the table checked against the cache
/// (`PagedKvCache::validate_block_table`, naming block_table). Returns the scale to use.
double validate_paged_decode(const char* function, const Tensor2& q, const PagedKvCache& cache,
                             std::span<const std::size_t> block_table, std::size_t context_len,
                             std::optional<double> scale);

/// @ingroup ch05
/// The same step (same arguments, same checks), returning with the output each query head's
/// log-sum-exp \f$ L_i = \ln \sum_{t < n} e^{s_{it}} \f$, as `gqa_decode_attention` does: what lets
/// the result over these blocks be merged with one over other positions. The form the optimized
/// and CUDA kernels are tested against.
/// @return out `[num_heads, head_dim]` and lse `[num_heads]`
GqaDecodeOutput paged_decode_attention_with_lse(const Tensor2& q, const PagedKvCache& cache,
                                               std::span<const std::size_t> block_table, std::size_t context_len,
                                               std::optional<double> scale = {});

/// @ingroup ch05
/// The same step for a live sequence `seq` of `cache`: over its whole length, through its own
/// block table.
/// @param q `[num_heads, head_dim]`
/// @param cache the paged cache
/// @param seq a live sequence with at least one token
/// @param scale default \f$ 1/\sqrt{d_k} \f$
/// @return `[num_heads, head_dim]`
Tensor2 paged_decode_attention(const Tensor2& q, const PagedKvCache& cache, SequenceId seq,
                               std::optional<double> scale = {});

/// @ingroup ch05
/// One decode step for a batch of sequences, the shape of vLLM's kernel (a query per sequence,
/// each through its own block table; sequences forked from one another read their shared blocks):
/// row \f$ r \f$ of the result is `paged_decode_attention(q[r], cache, seqs[r], scale)`.
/// @param q `[num_seqs, num_heads, head_dim]`
/// @param cache the paged cache
/// @param seqs `num_seqs` live sequences, each with at least one token
/// @param scale default \f$ 1/\sqrt{d_k} \f$
/// @return `[num_seqs, num_heads, head_dim]`
Tensor3 paged_decode_attention(const Tensor3& q, const PagedKvCache& cache, std::span<const SequenceId> seqs,
                               std::optional<double> scale = {});

}  // namespace tvlab::ref
