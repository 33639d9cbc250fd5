#pragma once
// Version 2 of opt's attention, head by head, shared by `opt::scaled_dot_product_attention_v2`,
// chapter 02's `opt::rope_attention_v2`, which rotates q and k while it loads each head, and
// chapter 05's `opt::grouped_scaled_dot_product_attention`, whose query heads share kv heads.

#include <cstddef>
#include <functional>

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::opt::detail {

/// The threads version 2 runs: one per head at most.
int attention_head_threads(std::size_t heads);

/// Called once per head before its products, by the thread `thread` (< the `threads` passed to
/// `attention_by_heads`): may point `q_head` and `k_head` (`[seq_q, head_dim]` of query head h and
/// `[seq_k, head_dim]` of the kv head it reads, initially into q and k) at the thread's own
/// transformed copies.
using HeadLoader = std::function<void(std::size_t h, std::size_t thread, const float*& q_head, const float*& k_head)>;

/// Per query head t: \f$ S = \text{scale}\,QK^\top \f$ (SGEMM), the mask in place, the softmax,
/// \f$ O = PV \f$ (SGEMM), with `threads` threads over the query heads. q has \f$ h \f$ heads, k and
/// v \f$ g \f$ (a divisor of \f$ h \f$): query head t reads kv head \f$ \lfloor t/(h/g) \rfloor \f$
/// (\f$ g = h \f$: its own). Inputs already checked.
Tensor3 attention_by_heads(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionConfig& cfg, float scale,
                           int threads, const HeadLoader& load_head);

}  // namespace tvlab::opt::detail
