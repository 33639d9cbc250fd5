#pragma once
/// @file
/// Threaded, vectorised activations (chapter 01). Must match `tvlab::ref::relu` etc.

#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// @ingroup ch01
/// Each activation runs as xsimd batches (`xsimd::erf`, `xsimd::tanh`, `xsimd::exp` on 8 or 16
/// floats at once) over 64 KiB chunks shared among the threads.
Tensor2 relu(const Tensor2& x);
/// @ingroup ch01
Tensor2 gelu(const Tensor2& x);
/// @ingroup ch01
Tensor2 gelu_tanh(const Tensor2& x);
/// @ingroup ch01
Tensor2 silu(const Tensor2& x);

}  // namespace tvlab::opt
