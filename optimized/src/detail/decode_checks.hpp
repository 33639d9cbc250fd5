#pragma once
// The checks of a decode step over a cache that is not a Tensor3 `[g, capacity, d]` (a quantized
// or bf16 cache, a cache laid out per token), with the messages of ref::validate_gqa_decode; they
// return the step's shape for split_k_decode.

#include <omp.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>

#include "tvlab/core/error.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/opt/gqa_decode.hpp"

#include "split_decode.hpp"

namespace tvlab::opt::detail {

/// The extent of a key or value cache, whatever its layout: kv heads, positions it has room for,
/// and the size of one head's vector.
struct CacheExtent {
  std::size_t heads, capacity, dim;
};

/// Checks q `[h, d]` against the caches `k` and `v` (named `k_name`, `v_name` in messages), the
/// length (in [1, capacity]), the scale and the number of splits (0: gqa_decode_splits for this
/// machine), and returns the shape with `block` (dot products) or `block_micro_kernel` (16 or more
/// query heads per kv head) positions per block, requested `piece` positions at a time (0: the
/// whole block).
inline SplitDecodeShape validate_split_decode(const char* function, const Tensor2& q, const char* k_name,
                                              CacheExtent k, const char* v_name, CacheExtent v, std::size_t length,
                                              std::optional<double> scale, std::size_t splits, std::size_t block,
                                              std::size_t block_micro_kernel, std::size_t piece = 0) {
  require_nonempty(function, "q", q);
  const std::size_t heads = q.shape()[0], d = q.shape()[1];
  require(k.dim == d, function, k_name, " has head_dim ", k.dim, ", expected ", d, " (the keys' dimension is the queries')");
  require(v.heads == k.heads, function, v_name, " has kv heads ", v.heads, ", expected ", k.heads,
          " (one value head per key head)");
  require(v.capacity == k.capacity, function, v_name, " has capacity ", v.capacity, ", expected ", k.capacity,
          " (the value cache holds the key cache's positions)");
  require(heads % k.heads == 0, function, "the query heads (", heads, ", rows of q) must be a multiple of the kv heads (",
          k.heads, " in ", k_name, "): each kv head serves h/g query heads");
  require(length >= 1 && length <= k.capacity, function, "length (", length, ") must be in [1, capacity = ", k.capacity,
          "]: the step attends to at least the token itself and to no position the cache has no room for");
  const double scale_value = scale.value_or(1.0 / std::sqrt(static_cast<double>(d)));
  require(std::isfinite(scale_value) && scale_value > 0.0 && scale_value <= std::numeric_limits<float>::max(), function,
          "scale (", scale_value, ") must be positive and representable in float");
  require_finite_max_abs(function, "q", q);
  if (splits == 0) splits = gqa_decode_splits(length, k.heads, static_cast<std::size_t>(omp_get_max_threads()));
  require(splits <= length, function, "splits (", splits, ") must not exceed length (", length,
          "): every split holds a position");
  const std::size_t group = heads / k.heads;
  const std::size_t chosen = group >= kMicroKernelRows ? block_micro_kernel : block;
  return {heads, k.heads, group, length, d, v.dim, static_cast<float>(scale_value), splits, chosen,
          piece == 0 ? chosen : std::min(piece, chosen)};
}

}  // namespace tvlab::opt::detail
