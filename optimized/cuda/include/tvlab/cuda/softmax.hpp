#pragma once
/// @file
/// CUDA row-wise softmax (chapter 00), host tensors in and out. Must match `tvlab::ref::softmax`.

#include "tvlab/core/tensor.hpp"

namespace tvlab::cuda {

/// @ingroup ch00
/// Copies `x` to the device, runs one thread block per row (block-wide max and sum by warp
/// shuffles), and copies the result back.
Tensor2 softmax(const Tensor2& x);

}  // namespace tvlab::cuda
