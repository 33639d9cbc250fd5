#pragma once
/// @file
/// Exercise 06.1: causal linear attention as a recurrence over its state, with the normaliser.
/// Same contract as `tvlab::ref::causal_linear_attention_recurrent`.

#include "tvlab/ref/linear_attention.hpp"

namespace tvlab::student {

/// @ingroup ch06
/// From `state` (the sums over the positions before), for t = 0 .. n-1 and every head:
/// \f$ S_t = S_{t-1} + \phi(k_t) v_t^\top \f$, \f$ z_t = z_{t-1} + \phi(k_t) \f$,
/// \f$ o_t = \text{scale}\,\phi(q_t)^\top S_t / (\text{scale}\,\phi(q_t)^\top z_t) \f$ (the numerator
/// alone when `cfg.normalize` is false); `state` ends as the sums over every position given, and is
/// left unchanged when the call throws. q, k `[h, n, d_k]`, v `[h, n, d_v]`; returns `[h, n, d_v]`.
Tensor3 causal_linear_attention_recurrent(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                          const LinearAttentionConfig& cfg, LinearAttentionState& state);

}  // namespace tvlab::student
