#pragma once
// Chapter 04's implementation registry: the online softmax and flash attention's forward and
// backward passes.

#include <cstddef>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "tvlab/analysis/io_model.hpp"
#include "tvlab/core/flash_config.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/online_softmax.hpp"

namespace tvlab::ch04 {

struct Impl {
  std::string name;
  bool needs_device = false;
  std::function<Tensor2(const Tensor2&, std::size_t)> online_softmax;
  std::function<ref::SoftmaxState(ref::SoftmaxState, ref::SoftmaxState)> softmax_merge;
  std::function<analysis::FlashTiles(std::size_t, std::size_t, std::size_t)> best_tiles;
  std::function<FlashOutput(const Tensor3&, const Tensor3&, const Tensor3&, const FlashConfig&)> flash_forward;
  std::function<FlashGrads(const Tensor3&, const Tensor3&, const Tensor3&, const Tensor3&, const Tensor2&, const Tensor3&,
                           const FlashConfig&)>
      flash_backward;
  /// The parts of `FlashConfig::mask` flash_forward and flash_backward implement; the others must throw.
  MaskSupport mask_support;
};

const std::vector<Impl>& registry();

inline void PrintTo(const Impl& impl, std::ostream* out) { *out << impl.name; }

}  // namespace tvlab::ch04
