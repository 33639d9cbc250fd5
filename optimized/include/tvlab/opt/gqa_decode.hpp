#pragma once
/// @file
/// One decode step over a KV cache on the CPU (chapter 05), GQA-aware flash-decoding. Must match
/// `tvlab::ref::gqa_decode_attention`.
///
/// A decode step does about 4 flops per cached float it reads (a dot product and an axpy per
/// position), so it is limited by memory bandwidth: the versions differ in how many times they
/// read the cache and how many cores they keep reading it.
///
/// | version | work items | cache reads per step |
/// | --- | --- | --- |
/// | v1 | one query head each | h/g times (each query head reads its kv head) |
/// | v2 | (kv head, split of the positions) | once: a kv head's keys and values serve its h/g query heads together |

#include <cstddef>
#include <optional>

#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/gqa_decode.hpp"

namespace tvlab::opt {

using ref::GqaDecodeOutput;

/// @ingroup ch05
/// v1, threads over query heads: head i streams the `length` keys of its kv head once for its
/// scores \f$ s_j = \text{scale}\,q_i \cdot k_j \f$ (SIMD dot products), takes
/// \f$ m = \max_j s_j \f$, then streams the values for \f$ o_i = \sum_j e^{s_j - m} v_j / \sum_j e^{s_j - m} \f$.
/// The h/g query heads of a group each read the same kv head: the cache is read h/g times.
/// Same contract as `ref::gqa_decode_attention`.
GqaDecodeOutput gqa_decode_attention_v1(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                        std::size_t length, std::optional<double> scale = std::nullopt);

/// @ingroup ch05
/// The number of splits v2 cuts `length` positions into for g kv heads and `threads` threads: enough
/// work items (g x splits) to give every thread at least 4 of them (even shares under dynamic
/// scheduling), but no split shorter than 256 positions, below which a split's partial result
/// and its merge cost more than the keys it reads. Always >= 1 and <= length.
std::size_t gqa_decode_splits(std::size_t length, std::size_t kv_heads, std::size_t threads);

/// @ingroup ch05
/// v2, split-K flash-decoding (Dao et al., 2023). The positions are cut into `splits` contiguous
/// ranges (0: `gqa_decode_splits` for this machine's thread count); threads take the work items
/// (kv head, split). Each reads its keys and values once, in blocks of B positions, for all h/g
/// query heads of the group: \f$ S = \text{scale}\,Q_g K_B^\top \f$ is a `[h/g, d] x [d, B]`
/// micro-product, then the online softmax keeps per query head a partial state
/// \f$ (m, \ell, \tilde O) \f$ over its split. The partials of a query head are merged as chapter
/// 04's `online_softmax_merge` merges two softmax states:
/// \f[ m = \max_s m_s,\quad \ell = \sum_s e^{m_s - m} \ell_s,\quad
///     o = \frac{\sum_s e^{m_s - m} \tilde O_s}{\ell},\quad L = m + \ln \ell. \f]
/// Same contract as `ref::gqa_decode_attention`; any number of splits gives the same result up to
/// float rounding.
GqaDecodeOutput gqa_decode_attention_v2(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                        std::size_t length, std::optional<double> scale = std::nullopt,
                                        std::size_t splits = 0);

/// @ingroup ch05
/// The decode step: the best version for the shape. v2 for GQA and MQA (the cache read once instead
/// of h/g times); v1 for MHA with at least 4 heads per thread, where both read the cache once and
/// v1's long runs of keys, then values, stream faster. Same contract as `ref::gqa_decode_attention`.
GqaDecodeOutput gqa_decode_attention(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                     std::size_t length, std::optional<double> scale = std::nullopt);

}  // namespace tvlab::opt
