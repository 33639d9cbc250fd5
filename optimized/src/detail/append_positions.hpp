#pragma once
// A cache that grows by whole tensors (MLA's and TPA's caches, `MlaCache`, `TpaCache`): the past
// positions followed by the new ones, as block copies. Shared by mla.cpp and tpa.cpp.

#include <algorithm>
#include <cstddef>

#include "tvlab/core/tensor.hpp"

namespace tvlab::opt::detail {

/// `[parts, seq + n, w]`: part p's rows are past's rows of p, then extra's (axis 1 grows).
inline Tensor3 append_positions(const Tensor3& past, const Tensor3& extra) {
  const std::size_t parts = extra.shape()[0], old_rows = past.shape()[1], new_rows = extra.shape()[1];
  const std::size_t width = extra.shape()[2];
  Tensor3 out = Tensor3::from_shape({parts, old_rows + new_rows, width});
  for (std::size_t p = 0; p < parts; ++p) {
    float* to = out.data() + p * (old_rows + new_rows) * width;
    std::copy_n(past.data() + p * old_rows * width, old_rows * width, to);
    std::copy_n(extra.data() + p * new_rows * width, new_rows * width, to + old_rows * width);
  }
  return out;
}

/// `[seq + n, w]`: past's rows, then extra's.
inline Tensor2 append_positions(const Tensor2& past, const Tensor2& extra) {
  const std::size_t old_rows = past.shape()[0], new_rows = extra.shape()[0], width = extra.shape()[1];
  Tensor2 out = Tensor2::from_shape({old_rows + new_rows, width});
  std::copy_n(past.data(), old_rows * width, out.data());
  std::copy_n(extra.data(), new_rows * width, out.data() + old_rows * width);
  return out;
}

}  // namespace tvlab::opt::detail
