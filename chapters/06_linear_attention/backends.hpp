#pragma once
/// @file
/// Chapter 06's backend registry (see `chapters/common/backend.hpp`): every implementation of the
/// chapter's functions, kernelised linear attention (non-causal, and causal in its recurrent,
/// parallel and chunked forms), with what it needs.

#include <cstddef>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "../common/backend.hpp"
#include "tvlab/core/linear_attention_config.hpp"
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

struct Backend {
  std::string name;
  BackendKind kind = BackendKind::reference;
  Capabilities caps;
  LinearFn linear_attention;          ///< non-causal (empty: not provided)
  CausalFn causal_parallel;           ///< causal, masked quadratic form (empty: not provided)
  CausalStatefulFn causal_recurrent;  ///< causal, token by token over a state (empty: not provided)
  CausalChunkedFn causal_chunked;     ///< causal, chunk by chunk (empty: not provided)
};

/// Every implementation, in the order the lesson reads them.
const std::vector<Backend>& backends();

/// gtest prints a parameter through PrintTo: the backend's name, not its bytes.
inline void PrintTo(const Backend& b, std::ostream* out) { *out << b.name; }

}  // namespace tvlab::linear
