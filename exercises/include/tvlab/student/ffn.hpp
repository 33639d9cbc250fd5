#pragma once
/// @file
/// Exercise 01.3: your SwiGLU feed-forward network. Same contract as `tvlab::ref::ffn_swiglu`.

#include "tvlab/core/ffn_types.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::student {

/// @ingroup ch01
Tensor2 ffn_swiglu(const Tensor2& x, const SwigluWeights& w);

}  // namespace tvlab::student
