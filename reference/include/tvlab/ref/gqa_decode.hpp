#pragma once
/// @file
/// One decode step over a KV cache (chapter 05): the newest token's queries attend to every cached
/// position. With grouped-query attention (GQA) the h query heads share g key/value heads, h/g
/// query heads per kv head; g = h is multi-head attention (MHA), g = 1 multi-query attention (MQA).

#include <cstddef>
#include <optional>

#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch05
/// The result of one decode step: the output of every query head and its log-sum-exp
/// \f$ L_i = \ln \sum_j e^{s_{ij}} \f$ (what lets partial results over parts of the cache be merged).
struct GqaDecodeOutput {
  Tensor2 out;  ///< `[h, d_v]`
  Tensor1 lse;  ///< `[h]`
};

/// @ingroup ch05
/// The sizes of a decode step, as `validate_gqa_decode` found them.
struct GqaDecodeDims {
  std::size_t heads;     ///< h, query heads
  std::size_t kv_heads;  ///< g, key/value heads
  std::size_t group;     ///< h / g, query heads per kv head
  std::size_t capacity;  ///< positions the cache has room for
  std::size_t length;    ///< positions it holds (the first `length`)
  std::size_t d;         ///< query/key head dimension
  std::size_t d_v;       ///< value head dimension
  double scale;          ///< the score scale, \f$ 1/\sqrt{d} \f$ unless given
};

/// @ingroup ch05
/// The extent of a key or value cache, whatever its layout or storage: kv heads, positions it has
/// room for, and the size of one head's vector.
struct DecodeCacheExtent {
  std::size_t heads;     ///< g
  std::size_t capacity;  ///< positions it has room for
  std::size_t dim;       ///< d (keys) or d_v (values)
};

/// @ingroup ch05
/// The checks of `validate_gqa_decode` for caches given by their extents (a quantized, bf16 or
/// per-token cache is not a `[g, capacity, d]` tensor): `k_name` and `v_name` name them in the
/// messages. Throws `tvlab::Error` naming the parameter.
GqaDecodeDims validate_decode_step(const char* function, const Tensor2& q, const char* k_name, DecodeCacheExtent k,
                                   const char* v_name, DecodeCacheExtent v, std::size_t length,
                                   std::optional<double> scale);

/// @ingroup ch05
/// The input checks every decode step shares (reference and optimized): q `[h, d]` finite and
/// non-empty, k_cache `[g, capacity, d]`, v_cache `[g, capacity, d_v]` with the same g and
/// capacity, h a multiple of g, 1 <= length <= capacity, a positive scale representable in float.
/// Throws `tvlab::Error` naming the parameter. The cached values are not scanned: that would read
/// the whole cache a second time, doubling the bytes a memory-bound step moves (a non-finite cached
/// value is caught in the result instead, `require_finite_decode_output`); the positions past
/// `length` are never read (they may hold anything, NaN included).
GqaDecodeDims validate_gqa_decode(const char* function, const Tensor2& q, const Tensor3& k_cache,
                                  const Tensor3& v_cache, std::size_t length, std::optional<double> scale);

/// @ingroup ch05
/// The check every decode step makes of its own result, since it does not scan the cache: an
/// infinite or NaN key or value among the first `length` positions makes the output or the
/// log-sum-exp non-finite, and the step then throws `tvlab::Error` naming k_cache and v_cache
/// instead of returning NaN. Reading the \f$ h\,d_v + h \f$ results costs nothing next to the
/// \f$ g \cdot \text{length} \cdot (d + d_v) \f$ cached floats a second scan of the cache would read.
void require_finite_decode_output(const char* function, const GqaDecodeOutput& result);

/// @ingroup ch05
/// Attention of one generated token over the first `length` positions of a contiguous cache.
/// Query head i reads kv head \f$ \lfloor i / (h/g) \rfloor \f$:
/// \f[ s_{ij} = \text{scale}\; q_i \cdot k_{g(i), j},\qquad
///     o_i = \frac{\sum_{j<\text{length}} e^{s_{ij} - m_i}\, v_{g(i), j}}{\sum_{j<\text{length}} e^{s_{ij} - m_i}},\qquad
///     L_i = m_i + \ln \sum_j e^{s_{ij} - m_i}, \f]
/// with \f$ m_i = \max_j s_{ij} \f$ and scale \f$ = 1/\sqrt{d} \f$ unless given. Plain loops, double
/// accumulation: the oracle `opt::gqa_decode_attention` is tested against.
/// @param q        the token's queries `[h, d]`
/// @param k_cache  cached keys `[g, capacity, d]`
/// @param v_cache  cached values `[g, capacity, d_v]`
/// @param length   valid positions, 1 <= length <= capacity
/// @param scale    score scale (default \f$ 1/\sqrt{d} \f$)
GqaDecodeOutput gqa_decode_attention(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                     std::size_t length, std::optional<double> scale = std::nullopt);

}  // namespace tvlab::ref
