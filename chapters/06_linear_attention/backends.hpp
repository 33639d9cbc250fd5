#pragma once
/// @file
/// Chapter 06's backend registry (see `chapters/common/backend.hpp`): every implementation of the
/// chapter's functions, kernelised linear attention (non-causal, and causal in its recurrent,
/// parallel and chunked forms) and the delta-rule family (recurrent and chunked), with what it needs.

#include <cstddef>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "../common/backend.hpp"
#include "tvlab/core/delta_rule_config.hpp"
#include "tvlab/core/linear_attention_config.hpp"
#include "tvlab/core/performer_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::linear {

/// Non-causal linear attention: q `[h, n_q, d_k]` over k `[h, n_k, d_k]`, v `[h, n_k, d_v]`.
/// (`ref::linear_attention`'s contract.)
using LinearFn = std::function<Tensor3(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                       const LinearAttentionConfig& cfg)>;
/// Causal linear attention from an empty state, q, k, v of one length. (`ref::causal_linear_attention_parallel`'s.)
using CausalFn = LinearFn;
/// Causal linear attention from `state`, which it updates. (`ref::causal_linear_attention_recurrent`'s.)
using CausalStatefulFn = std::function<Tensor3(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                               const LinearAttentionConfig& cfg, LinearAttentionState& state)>;
/// The same in chunks of `chunk_size` positions. (`ref::causal_linear_attention_chunked`'s.)
using CausalChunkedFn =
    std::function<Tensor3(const Tensor3& q, const Tensor3& k, const Tensor3& v, const LinearAttentionConfig& cfg,
                          std::size_t chunk_size, LinearAttentionState& state)>;

/// The delta-rule family's recurrence over a whole sequence: q, k `[h, T, d_k]`, v `[h, T, d_v]`,
/// beta `[h, T]`, the gate, from `initial_state` `[h, d_k, d_v]` (empty: zeros).
/// (`ref::delta_rule_recurrent`'s contract.)
using DeltaFn = std::function<DeltaRuleOutput(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor2& beta,
                                              const DeltaRuleGate& gate, const DeltaRuleConfig& cfg,
                                              const Tensor3& initial_state)>;
/// The same in chunks of `chunk_size` positions. (`ref::delta_rule_chunked`'s contract.)
using DeltaChunkedFn = std::function<DeltaRuleOutput(
    const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor2& beta, const DeltaRuleGate& gate,
    const DeltaRuleConfig& cfg, std::size_t chunk_size, const Tensor3& initial_state)>;

/// Performer attention (FAVOR+) over the random features W `[m, d]`: q `[h, n_q, d]` over k `[h, n_k, d]`,
/// v `[h, n_k, d_v]`, every key or (`causal`) the keys up to each query. (`ref::performer_attention`'s contract.)
using PerformerFn = std::function<Tensor3(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                          const PerformerFeatures& features, bool causal)>;

struct Backend {
  std::string name;
  BackendKind kind = BackendKind::reference;
  Capabilities caps;
  LinearFn linear_attention;          ///< non-causal (empty: not provided)
  CausalFn causal_parallel;           ///< causal, masked quadratic form (empty: not provided)
  CausalStatefulFn causal_recurrent;  ///< causal, token by token over a state (empty: not provided)
  CausalChunkedFn causal_chunked;     ///< causal, chunk by chunk (empty: not provided)
  DeltaFn delta_recurrent;            ///< the delta-rule family, token by token (empty: not provided)
  DeltaChunkedFn delta_chunked;       ///< the delta-rule family, chunk by chunk (empty: not provided)
  PerformerFn performer;              ///< Performer attention, FAVOR+ (empty: not provided)
};

/// Every implementation, in the order the lesson reads them.
const std::vector<Backend>& backends();

/// gtest prints a parameter through PrintTo: the backend's name, not its bytes.
inline void PrintTo(const Backend& b, std::ostream* out) { *out << b.name; }

}  // namespace tvlab::linear
