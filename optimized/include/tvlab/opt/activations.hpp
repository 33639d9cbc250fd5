#pragma once
/// @file
/// Threaded, vectorised activations (chapter 01). Must match `tvlab::ref::relu` etc.

#include <cstddef>

#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// @ingroup ch01
Tensor2 relu(const Tensor2& x);
/// @ingroup ch01
Tensor2 gelu(const Tensor2& x);
/// @ingroup ch01
Tensor2 gelu_tanh(const Tensor2& x);
/// @ingroup ch01
Tensor2 silu(const Tensor2& x);

/// The scalar forms, in float, shared by the fused FFN epilogues.
inline float relu_scalar(float v) { return v > 0.0f ? v : 0.0f; }
float gelu_scalar(float v);
float gelu_tanh_scalar(float v);
float silu_scalar(float v);

}  // namespace tvlab::opt
