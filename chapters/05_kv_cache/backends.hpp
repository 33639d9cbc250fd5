#pragma once
/// @file
/// Chapter 05's backend registry (see `chapters/common/backend.hpp`): every implementation of the
/// decode step of grouped-query attention over a KV cache, with what it needs.

#include <cstddef>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "../common/backend.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::kv {

/// What one decode step of attention returns for the new token: each query head's output and the
/// log of its softmax denominator, \f$ \mathrm{lse}_t = \log \sum_{p < n} e^{s_{tp}} \f$ (with it,
/// attention over two parts of the cache can be merged, as chapter 04's online softmax does).
/// (When `ref/opt::gqa_decode_attention` arrive with their own result type of these two members,
/// this becomes an alias of it, so that they register without a wrapper.)
struct DecodeAttention {
  Tensor2 out;  ///< `[h, d_v]`
  Tensor1 lse;  ///< `[h]`
};

/// The decode step: the new token's queries `q` `[h, d]` attend over the first `length` positions
/// of the caches `k_cache` `[g, capacity, d]` and `v_cache` `[g, capacity, d_v]`; query head
/// \f$ t \f$ reads kv head \f$ \lfloor t / (h/g) \rfloor \f$. `scale`: \f$ 1/\sqrt{d} \f$ when absent.
/// Positions from `length` to `capacity` are free slots and must not be read.
using DecodeFn = std::function<DecodeAttention(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                               std::size_t length, std::optional<double> scale)>;

struct Backend {
  std::string name;
  BackendKind kind = BackendKind::reference;
  Capabilities caps;
  DecodeFn decode;  ///< one decode step of grouped-query attention over a cache (empty: not provided)
};

/// ref (and, once they exist, the optimized and CUDA decode kernels).
const std::vector<Backend>& backends();

/// The reference decode step: chapter 05's `ref::grouped_scaled_dot_product_attention` with one
/// query row over the first `length` cached rows, and the log-sum-exp of each head's scores in
/// double. Throws `tvlab::Error` naming q, k_cache, v_cache, length or scale for a bad input.
DecodeAttention reference_decode_attention(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                           std::size_t length, std::optional<double> scale);

/// gtest prints a parameter through PrintTo: the backend's name, not its bytes.
inline void PrintTo(const Backend& b, std::ostream* out) { *out << b.name; }

}  // namespace tvlab::kv
