#pragma once
// Version 2 of opt's attention, head by head, shared by `opt::scaled_dot_product_attention_v2`
// and chapter 02's `opt::rope_attention_v2`, which rotates q and k while it loads each head.

#include <cstddef>
#include <functional>

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::opt::detail {

/// The threads version 2 runs: one per head at most.
int attention_head_threads(std::size_t heads);

/// Called once per head before its products, by the thread `thread` (< the `threads` passed to
/// `attention_by_heads`): may point `q_head` and `k_head` (`[seq_q, head_dim]` and
/// `[seq_k, head_dim]` of head h, initially into q and k) at the thread's own transformed copies.
using HeadLoader = std::function<void(std::size_t h, std::size_t thread, const float*& q_head, const float*& k_head)>;

/// Per head: \f$ S = \text{scale}\,QK^\top \f$ (SGEMM), the mask in place, the softmax, \f$ O = PV \f$
/// (SGEMM), with `threads` threads over heads. Inputs already checked.
Tensor3 attention_by_heads(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionConfig& cfg, float scale,
                           int threads, const HeadLoader& load_head);

}  // namespace tvlab::opt::detail
