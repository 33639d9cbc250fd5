#pragma once
/// @file
/// The two layouts of a KV cache in memory, and the decode step over the second (chapter 05).
///
/// - **Per head**, `[g, capacity, d]`: the positions of one kv head contiguous. This is the layout
///   of `gqa_decode_attention` and the other kernels of the chapter: a work item (kv head, split)
///   reads one contiguous run of `length/splits` rows of d floats.
/// - **Per token**, `[capacity, g, d]`: the g heads of one position together, as the projections
///   of a new token produce them (its K is one `[g, d]` row block).
///
/// What each costs:
/// - *Appending a token* (every step) writes one contiguous \f$ g\,d \f$ row per tensor in the per
///   token layout (4 KiB at g = 8, d = 128 in float), but g separate rows of d floats,
///   capacity \f$ d \f$ floats apart, in the per head layout. Either way the bytes are the same, and
///   a row of 512 bytes is 8 whole cache lines: the scatter costs little.
/// - *The decode step* reads, for one kv head, consecutive positions \f$ g\,d \f$ floats apart in
///   the per token layout instead of d: each key or value row (512 bytes at d = 128) is still
///   contiguous, whole cache lines, so no byte read is wasted; what changes is that a run of
///   positions of one head is no longer one sequential stream. At g = 8, d = 128 in float the
///   stride is 4 KiB, a page: every row of a head starts a new page (one TLB entry per row; the L2
///   stream prefetcher, which stays within a page, cannot run ahead of the kernel), and every row
///   maps to the same L1 sets. The chapter's benchmark (`kv_layout_decode_per_head` against
///   `kv_layout_decode_per_token`) measures what that costs: about twice the time per token at 4K
///   and 32K positions on the machine of the chapter's figures, although both read the same bytes.
///
/// The kernel here is `gqa_decode_attention_v2`'s split-K flash-decoding, the same code with the
/// row stride \f$ g\,d \f$ instead of d.

#include <cstddef>
#include <optional>

#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/gqa_decode.hpp"

namespace tvlab::opt {

/// @ingroup ch05
/// A per head cache `[g, capacity, d]` laid out per token, `[capacity, g, d]`:
/// \f$ y_{t, h, c} = x_{h, t, c} \f$. The inverse is the same transposition of the first two axes
/// (`per_head_layout`).
Tensor3 per_token_layout(const Tensor3& per_head);

/// @ingroup ch05
/// A per token cache `[capacity, g, d]` laid out per head, `[g, capacity, d]`.
Tensor3 per_head_layout(const Tensor3& per_token);

/// @ingroup ch05
/// The decode step over a cache laid out per token: `gqa_decode_attention_v2` with consecutive
/// positions of a kv head \f$ g\,d \f$ (keys) and \f$ g\,d_v \f$ (values) floats apart. Equals
/// `gqa_decode_attention_v2(q, per_head_layout(k_cache), per_head_layout(v_cache), ...)` (the same
/// arithmetic in the same order). Same contract as `ref::gqa_decode_attention` otherwise, with the
/// caches' first two axes swapped.
/// @param q `[h, d]`, h a multiple of g
/// @param k_cache `[capacity, g, d]`
/// @param v_cache `[capacity, g, d_v]`
/// @param length positions attended, in [1, capacity]
/// @param scale default \f$ 1/\sqrt{d} \f$
/// @param splits as `gqa_decode_attention_v2` (0: chosen for this machine)
ref::GqaDecodeOutput gqa_decode_attention_per_token(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                                    std::size_t length, std::optional<double> scale = std::nullopt,
                                                    std::size_t splits = 0);

}  // namespace tvlab::opt
