#pragma once
/// @file
/// Exercise 05.1: one decode step of grouped-query attention over a contiguous KV cache, in which
/// query head \f$ i \f$ reads kv head \f$ \lfloor i / (h/g) \rfloor \f$. Same contract as
/// `tvlab::ref::gqa_decode_attention`.

#include <cstddef>
#include <optional>

#include "tvlab/ref/gqa_decode.hpp"

namespace tvlab::student {

using ref::GqaDecodeOutput;

/// @ingroup ch05
/// The new token's queries `q` `[h, d]` attend over the first `length` positions of `k_cache`
/// `[g, capacity, d]` and `v_cache` `[g, capacity, d_v]`; returns each head's output `[h, d_v]` and
/// log-sum-exp `[h]`. Throws `tvlab::Error` naming the parameter, among others when \f$ g = 0 \f$
/// or when \f$ g \f$ does not divide \f$ h \f$.
GqaDecodeOutput gqa_decode_attention(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                     std::size_t length, std::optional<double> scale = std::nullopt);

}  // namespace tvlab::student
