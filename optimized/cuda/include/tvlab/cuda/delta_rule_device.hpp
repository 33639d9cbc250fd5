#pragma once
/// @file
/// Device-pointer entry point of chapter 06's delta-rule family on a CUDA device (the kernels
/// behind `tvlab/cuda/delta_rule.hpp`): inputs, workspace, state and outputs already in device
/// memory. No xtensor here, so that nvcc compiles it alone.
/// @ingroup ch06

#include <cstddef>

namespace tvlab::cuda::device {

/// One pass of the delta-rule family (see `ref::delta_rule_recurrent`) from the state, which it
/// updates in place.
struct DeltaRuleArgs {
  const float* q = nullptr;     ///< `[heads, n, d_k]`
  const float* k = nullptr;     ///< `[heads, n, d_k]`
  const float* v = nullptr;     ///< `[heads, n, d_v]`
  const float* beta = nullptr;  ///< `[heads, n]`
  /// The log gates: `[heads, n]` (one per head and token), `[heads, n, d_k]` when
  /// `per_channel_gate`, or null for none.
  const float* gate = nullptr;
  bool per_channel_gate = false;
  float* q_rows = nullptr;  ///< workspace `[heads, n, d_k]`: scale q, divided by its norm when asked
  float* k_rows = nullptr;  ///< workspace `[heads, n, d_k]`: k, divided by its norm when asked
  float* state = nullptr;   ///< `[heads, d_k, d_v]`: \f$ S_0 \f$ in, \f$ S_T \f$ out
  float* out = nullptr;     ///< `[heads, n, d_v]`
  /// 0 when every row could be normalised and every value stayed finite; 1 otherwise (the host
  /// then lets the reference answer or name the cause).
  int* fault = nullptr;
  std::size_t heads = 0, n = 0, d_k = 0, d_v = 0;
  bool delta = true;
  bool l2_normalize_qk = false;
  float scale = 1.0f;
  /// Positions per chunk; 0 runs the recurrence token by token.
  std::size_t chunk_size = 0;
};

/// Dynamic shared memory one thread block needs (chunk_size 0: the recurrence).
std::size_t delta_rule_shared_bytes(std::size_t d_k, std::size_t chunk_size, bool per_channel_gate);

/// Prepares the rows of q and k, then launches the recurrent (chunk_size 0) or the chunked kernel.
void delta_rule(const DeltaRuleArgs& args);

}  // namespace tvlab::cuda::device
