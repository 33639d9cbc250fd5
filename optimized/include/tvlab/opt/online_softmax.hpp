#pragma once
/// @file
/// The online softmax on the CPU (chapter 04). Must match `tvlab::ref::online_softmax`.

#include <cstddef>

#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/online_softmax.hpp"

namespace tvlab::opt {

// Folding one state into another is scalar arithmetic on two numbers: the optimized side uses the
// reference's functions under the same names.
using ref::online_softmax_merge;
using ref::online_softmax_update;
using ref::SoftmaxState;

/// @ingroup ch04
/// Row-wise softmax in two passes over blocks of `block` columns, as `ref::online_softmax`: each
/// block's maximum and sum of exponentials in float SIMD batches (xsimd), the running state in
/// float, rows in parallel. Same contract (block > 0, NaN / +inf rejected, a fully masked row
/// gives zeros).
Tensor2 online_softmax(const Tensor2& x, std::size_t block);

}  // namespace tvlab::opt
