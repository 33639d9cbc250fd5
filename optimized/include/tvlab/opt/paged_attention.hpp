#pragma once
/// @file
/// One decode step over a paged KV cache on the CPU (chapter 05): the split-K, GQA-aware
/// flash-decoding of `gqa_decode_attention_v2` with the keys and values read where the block table
/// says they are. Must match `tvlab::ref::paged_decode_attention_with_lse`.
///
/// Paging changes only the addresses: a block of b positions (16 in vLLM) of one kv head is
/// `b * d` consecutive floats of keys and as many of values, so the kernel reads runs of b
/// positions instead of one run per split. The bytes read per step are those of the contiguous
/// step, \f$ 2\, g\, n\, d \f$ floats; what paging adds is one table lookup and one more call of the
/// inner products per b positions.
///
/// A cache stored in bf16, INT8 or FP8 E4M3 (`PagedKvConfig::storage`) goes through the same
/// kernel: each request of up to b rows of one page is turned into floats in a per-thread buffer
/// (bf16 widened by a 16-bit shift, \f$ \hat x = s\,q \f$ or \f$ s\,\mathrm{e4m3}(q) \f$ with the
/// slot's scale), as the contiguous narrow caches are (`tvlab/opt/quantized_kv_attention.hpp`), and
/// the step reads \f$ 2\,g\,n\,d \f$ elements of 2 or 1 bytes (plus \f$ 2\,g\,n \f$ float
/// scales) instead of 4.

#include <cstddef>
#include <optional>
#include <span>

#include "tvlab/core/paged_kv_cache.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/gqa_decode.hpp"

namespace tvlab::opt {

using ref::GqaDecodeOutput;

/// @ingroup ch05
/// The decode step over the first `context_len` tokens that `block_table` maps in `cache`, with
/// `splits` ranges of positions (0: `gqa_decode_splits` for this machine's thread count). Work
/// items are (kv head, split): each reads its kv head's keys and values of its split once, block by
/// block of the table, for the h/g query heads of the group, and keeps per query head a partial
/// softmax state \f$ (m, \ell, \tilde O) \f$; the partials are merged as v2 merges them,
/// \f$ m = \max_s m_s \f$, \f$ \ell = \sum_s e^{m_s - m} \ell_s \f$,
/// \f$ o = \sum_s e^{m_s - m} \tilde O_s / \ell \f$, \f$ L = m + \ln \ell \f$. A split may begin and
/// end inside a block of the cache. Same checks as the reference (`ref::validate_paged_decode`: a
/// bad table throws `tvlab::Error` naming block_table); splits must not exceed context_len.
GqaDecodeOutput paged_decode_attention_split_k(const Tensor2& q, const PagedKvCache& cache,
                                               std::span<const std::size_t> block_table, std::size_t context_len,
                                               std::optional<double> scale, std::size_t splits);

/// @ingroup ch05
/// The decode step over a paged cache: `paged_decode_attention_split_k` with the splits chosen for
/// this machine. Same arguments, checks and result as `ref::paged_decode_attention_with_lse`:
/// out `[num_heads, head_dim]`, lse `[num_heads]`.
GqaDecodeOutput paged_decode_attention_with_lse(const Tensor2& q, const PagedKvCache& cache,
                                                std::span<const std::size_t> block_table, std::size_t context_len,
                                                std::optional<double> scale = std::nullopt);

/// @ingroup ch05
/// The outputs of `paged_decode_attention_with_lse` alone, `[num_heads, head_dim]`, as
/// `ref::paged_decode_attention` returns them.
Tensor2 paged_decode_attention(const Tensor2& q, const PagedKvCache& cache, std::span<const std::size_t> block_table,
                               std::size_t context_len, std::optional<double> scale = std::nullopt);

}  // namespace tvlab::opt
