#pragma once
/// @file
/// Exercise 00.1: your row-wise softmax. Same contract as `tvlab::ref::softmax`.

#include "tvlab/core/tensor.hpp"

namespace tvlab::student {

/// @ingroup ch00
/// Stable softmax of every row; -inf entries get weight 0, a row of only -inf gives zeros,
/// NaN or +inf throws `tvlab::Error` naming `x`.
Tensor2 softmax(const Tensor2& x);

}  // namespace tvlab::student
