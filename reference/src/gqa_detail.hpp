#pragma once
// The steps grouped-query attention (gqa_attention.cpp) and decoding with a KV cache
// (kv_cache.cpp) share: the projections into heads and back, and the attention of query heads over
// the first seq_k rows of shared key/value heads. Private to the reference library: the callers
// check every input first (with ref::validate_grouped_attention, tvlab/ref/gqa_attention.hpp).

#include <cstddef>
#include <cstdint>

#include "tvlab/core/attention_mask.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref::detail {

/// Heads of a projection: out(t, i, d) = sum_c x(i, c) w(c, t * head_dim + d), for the rows
/// [first_row, x.rows) of x (earlier rows are not projected). Adds the multiply-adds to `macs`.
Tensor3 project_to_heads(const Tensor2& x, std::size_t first_row, const Tensor2& w, std::size_t heads,
                         std::size_t head_dim, std::uint64_t& macs);

/// Concatenates the heads and projects back: y(i, c) = sum_t sum_d o(t, i, d) w_o(t * head_dim + d, c).
/// Adds the multiply-adds to `macs`.
Tensor2 project_from_heads(const Tensor3& o, const Tensor2& w_o, std::uint64_t& macs);

/// Query head t of q attends to the first seq_k rows of kv head t / (h/g) of k and v, under `mask`
/// (for seq_q queries and seq_k keys). Written in attention.cpp: chapter 00's
/// scaled_dot_product_attention is the case g = h. Returns [h, seq_q, head_dim_v].
Tensor3 grouped_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, std::size_t seq_k, double scale,
                          const AttentionMask& mask);

}  // namespace tvlab::ref::detail
