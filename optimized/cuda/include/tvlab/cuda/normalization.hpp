#pragma once
/// @file
/// CUDA LayerNorm and RMSNorm, forward and backward (chapter 01), host tensors in and out.
/// Must match `tvlab::ref::layer_norm` etc.

#include "tvlab/core/norm_types.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::cuda {

/// @ingroup ch01
Tensor2 layer_norm(const Tensor2& x, const Tensor1& gamma, const Tensor1& beta, double eps = 1e-5);
/// @ingroup ch01
LayerNormGrads layer_norm_backward(const Tensor2& x, const Tensor1& gamma, const Tensor2& dy, double eps = 1e-5);
/// @ingroup ch01
Tensor2 rms_norm(const Tensor2& x, const Tensor1& gamma, double eps = 1e-6);
/// @ingroup ch01
RmsNormGrads rms_norm_backward(const Tensor2& x, const Tensor1& gamma, const Tensor2& dy, double eps = 1e-6);

}  // namespace tvlab::cuda
