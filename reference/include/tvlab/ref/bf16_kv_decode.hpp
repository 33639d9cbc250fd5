#pragma once
/// @file
/// Chapter 05, the reference of one decode step over a bf16 KV cache (`tvlab/core/kv_bf16.hpp`).
/// @ingroup ch05

#include <cstddef>
#include <optional>

#include "tvlab/core/kv_bf16.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/gqa_decode.hpp"

namespace tvlab::ref {

/// @ingroup ch05
/// `gqa_decode_attention` over the values a bf16 cache holds: every key and value read back
/// exactly (bf16 to float to double loses nothing), then the decode step in double,
/// \f[ o_i = \sum_{t < \text{length}} \mathrm{softmax}_t\!\big(\text{scale}\; q_i \cdot k_{g(i), t}\big)\, v_{g(i), t}. \f]
/// What bf16 costs the output is then the rounding of the cache alone.
/// @param q `[num_heads, head_dim]`, num_heads a multiple of the cache's heads
/// @param k_cache keys `[num_kv_heads, capacity, head_dim]`
/// @param v_cache values `[num_kv_heads, capacity, head_dim_v]`
/// @param length positions attended, in [1, capacity]
/// @param scale default \f$ 1/\sqrt{d_k} \f$
GqaDecodeOutput bf16_kv_decode_attention(const Tensor2& q, const Bf16Kv& k_cache, const Bf16Kv& v_cache,
                                         std::size_t length, std::optional<double> scale = std::nullopt);

}  // namespace tvlab::ref
