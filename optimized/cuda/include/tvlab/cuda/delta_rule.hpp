#pragma once
/// @file
/// Chapter 06's delta-rule family (DeltaNet, Gated DeltaNet, KDA; decayed or plain linear attention
/// without the subtraction) on a CUDA device, host tensors in and out: the recurrence (one token is
/// the decode step) and the chunked WY/UT form, with the names, signatures, checks and error
/// messages of `tvlab/ref/delta_rule.hpp`. The device-pointer entry point is in
/// `tvlab/cuda/delta_rule_device.hpp`.
///
/// A first kernel prepares the rows of q and k (one warp per row: the scale, and the L2 norm summed
/// in double when `cfg.l2_normalize_qk`). The columns of the state are independent, so the grid is
/// (head, block of 32 value columns): a thread block keeps its 32 columns of S, all \f$ d_k \f$
/// rows, in shared memory, lane l the column and warp w the rows \f$ c \equiv w \pmod 4 \f$, so that
/// every thread decays, predicts with, writes and reads the same elements of S at every step. Per
/// chunk of C positions the chunked kernel stages K, Q and the cumulative log gates
/// \f$ G_i = \sum_{s \le i} g_s \f$ (summed in double, kept as a pair of floats), forms
/// \f$ A_{ij} = \sum_c k_i[c]\, k_j[c]\, e^{G_i[c] - G_j[c]} \f$ and the query-key weights alike, solves
/// the unit lower-triangular system for U by forward substitution (one column per lane), then
/// writes the outputs and carries the state, as `ref::delta_rule_chunked` does in double. Every
/// block recomputes the \f$ C \times C \f$ matrices its columns share. Where a row cannot be normalised
/// or a value leaves float's range on the device, the call returns the reference's answer, or
/// throws its error.
/// @ingroup ch06

#include <cstddef>

#include "tvlab/core/delta_rule_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::cuda {

/// @ingroup ch06
/// See `ref::delta_rule_recurrent`: token by token from `initial_state` (zeros when empty). One
/// token (T = 1) from the state of the context is a decode step.
DeltaRuleOutput delta_rule_recurrent(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor2& beta,
                                     const DeltaRuleGate& gate, const DeltaRuleConfig& cfg,
                                     const Tensor3& initial_state = Tensor3::from_shape({0, 0, 0}));

/// @ingroup ch06
/// See `ref::delta_rule_chunked`: chunks of `chunk_size` positions. Throws `tvlab::Error` naming
/// `chunk_size` when it is 0, or when a chunk's shared memory,
/// \f$ 32 d_k + 2 C d_k + 2 C w + 2 w + 2 C^2 + 33 C \f$ floats (\f$ w = d_k \f$ with a per-channel gate, 1
/// otherwise), exceeds the device's limit per block (at \f$ d_k = 128 \f$ and C = 64: 121 KB for
/// Gated DeltaNet, 185 KB for KDA).
DeltaRuleOutput delta_rule_chunked(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor2& beta,
                                   const DeltaRuleGate& gate, const DeltaRuleConfig& cfg, std::size_t chunk_size,
                                   const Tensor3& initial_state = Tensor3::from_shape({0, 0, 0}));

}  // namespace tvlab::cuda
