#pragma once
/// @file
/// Chapter 03's backend registry (see `chapters/common/backend.hpp`): every implementation of
/// the block-sparse attention and of the sliding-window attention, with what it needs.

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "../common/backend.hpp"
#include "tvlab/core/attention_mask.hpp"
#include "tvlab/core/flash_config.hpp"
#include "tvlab/core/sparse_pattern.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::sparse {

using BlockSparseFn = std::function<FlashOutput(const Tensor3&, const Tensor3&, const Tensor3&, const HeadLayouts&,
                                                std::optional<double>)>;
using SlidingWindowFn = std::function<FlashOutput(const Tensor3&, const Tensor3&, const Tensor3&, SlidingWindow,
                                                  std::optional<double>)>;

struct Backend {
  std::string name;
  BackendKind kind = BackendKind::reference;
  Capabilities caps;
  BlockSparseFn block_sparse;      ///< attention over the blocks of a layout (empty: not provided)
  SlidingWindowFn sliding_window;  ///< attention over a sliding window, no layout (empty: not provided)
};

/// ref, the optimized versions, the CUDA kernels, student.
const std::vector<Backend>& backends();

/// gtest prints a parameter through PrintTo: the backend's name, not its bytes.
inline void PrintTo(const Backend& b, std::ostream* out) { *out << b.name; }

}  // namespace tvlab::sparse
