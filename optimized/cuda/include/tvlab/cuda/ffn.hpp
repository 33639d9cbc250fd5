#pragma once
/// @file
/// CUDA feed-forward networks (chapter 01): cuBLAS SGEMMs with fused activation epilogue
/// kernels. Must match `tvlab::ref::ffn_relu` etc.

#include "tvlab/core/ffn_types.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::cuda {

/// @ingroup ch01
Tensor2 ffn_relu(const Tensor2& x, const FfnWeights& w);
/// @ingroup ch01
Tensor2 ffn_gelu(const Tensor2& x, const FfnWeights& w);
/// @ingroup ch01
Tensor2 ffn_swiglu(const Tensor2& x, const SwigluWeights& w);

}  // namespace tvlab::cuda
