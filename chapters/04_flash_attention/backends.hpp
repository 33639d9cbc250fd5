#pragma once
/// @file
/// Chapter 04's backend registry: every implementation of the online softmax, its merge, the
/// best tile sizes, and flash attention's forward and backward passes, with what each can run
/// (see `chapters/common/backend.hpp`).

#include <cstddef>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "../common/backend.hpp"
#include "tvlab/analysis/io_model.hpp"
#include "tvlab/core/flash_config.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/online_softmax.hpp"

namespace tvlab::ch04 {

/// What a flash kernel's structure imposes on its configuration.
struct FlashLimits {
  bool tiles_keys = true;       ///< loops over key tiles, so `tiles_computed`/`tiles_skipped` count them
  std::size_t max_tile_rows = 0;  ///< one thread per row of a tile: block_q and block_k at most this (0: any)
  bool sixteen_bit_only = false;  ///< multiplies fp16/bf16 inputs only (tensor cores): not run on fp32 cases
};

struct Backend {
  std::string name;
  BackendKind kind = BackendKind::reference;
  Capabilities caps;
  FlashLimits limits;
  std::function<Tensor2(const Tensor2&, std::size_t)> online_softmax;
  std::function<ref::SoftmaxState(ref::SoftmaxState, ref::SoftmaxState)> softmax_merge;
  std::function<analysis::FlashTiles(std::size_t, std::size_t, std::size_t)> best_tiles;
  std::function<FlashOutput(const Tensor3&, const Tensor3&, const Tensor3&, const FlashConfig&)> flash_forward;
  std::function<FlashGrads(const Tensor3&, const Tensor3&, const Tensor3&, const Tensor3&, const Tensor2&, const Tensor3&,
                           const FlashConfig&)>
      flash_backward;
};

/// ref, opt, every numbered version of opt's forward and backward passes, the CUDA kernels, student.
const std::vector<Backend>& backends();

inline void PrintTo(const Backend& b, std::ostream* out) { *out << b.name; }

}  // namespace tvlab::ch04
