#pragma once
/// @file
/// CUDA activations (chapter 01), host tensors in and out. Must match `tvlab::ref::relu` etc.

#include "tvlab/core/tensor.hpp"

namespace tvlab::cuda {

/// @ingroup ch01
Tensor2 relu(const Tensor2& x);
/// @ingroup ch01
Tensor2 gelu(const Tensor2& x);
/// @ingroup ch01
Tensor2 gelu_tanh(const Tensor2& x);
/// @ingroup ch01
Tensor2 silu(const Tensor2& x);

}  // namespace tvlab::cuda
