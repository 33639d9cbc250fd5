#pragma once
// The checks of a decode step over a cache that is not a Tensor3 `[g, capacity, d]` (a quantized
// or bf16 cache, a cache laid out per token): ref::validate_decode_step's, and the split count;
// they return the step's shape for split_k_decode.

#include <omp.h>

#include <cstddef>
#include <optional>

#include "tvlab/core/error.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/opt/gqa_decode.hpp"
#include "tvlab/ref/gqa_decode.hpp"

#include "split_decode.hpp"

namespace tvlab::opt::detail {

using ref::DecodeCacheExtent;

// Positions per block of a work item: 512, so that keys and values are read in long runs (256 KiB
// each at d = 128) that stay in L2 between the scores and P V.
inline constexpr std::size_t kDecodeBlock = 512;
static_assert(kDecodeBlock % kTileCols == 0, "a block is a whole number of micro-kernel widths");

/// How split_k_decode walks a step: blocks of `block` positions (a multiple of kLanes), requested
/// `piece` positions at a time (0: the whole block), by work items of `heads_per_item` kv heads
/// (1, or all g: see SplitDecodeShape).
struct SplitDecodeWalk {
  std::size_t piece = 0;
  std::size_t block = kDecodeBlock;
  std::size_t heads_per_item = 1;
};

/// The shape split_k_decode runs for a checked step `dims`: `splits` ranges of positions (0:
/// gqa_decode_splits for this machine and the step's kv_heads / heads_per_item items per split; no
/// more than the positions, which `length_name` names in the message), walked as `walk` says.
inline SplitDecodeShape split_decode_shape(const char* function, const char* length_name,
                                           const ref::GqaDecodeDims& dims, std::size_t splits,
                                           SplitDecodeWalk walk = {}) {
  const std::size_t n = dims.length;
  if (splits == 0)
    splits = gqa_decode_splits(n, dims.kv_heads / walk.heads_per_item, static_cast<std::size_t>(omp_get_max_threads()));
  require(splits <= n, function, "splits (", splits, ") must not exceed ", length_name, " (", n,
          "): every split holds a position");
  return {dims.heads,
          dims.kv_heads,
          dims.group,
          n,
          dims.d,
          dims.d_v,
          static_cast<float>(dims.scale),
          splits,
          walk.block,
          walk.piece == 0 ? walk.block : walk.piece,
          walk.heads_per_item};
}

/// Checks q `[h, d]` against the caches `k` and `v` (named `k_name`, `v_name` in messages) as
/// `ref::validate_decode_step` does, and returns the step's `split_decode_shape`.
inline SplitDecodeShape validate_split_decode(const char* function, const Tensor2& q, const char* k_name,
                                              DecodeCacheExtent k, const char* v_name, DecodeCacheExtent v,
                                              std::size_t length, std::optional<double> scale, std::size_t splits,
                                              std::size_t piece = 0) {
  return split_decode_shape(function, "length",
                            ref::validate_decode_step(function, q, k_name, k, v_name, v, length, scale), splits,
                            {.piece = piece});
}

}  // namespace tvlab::opt::detail
