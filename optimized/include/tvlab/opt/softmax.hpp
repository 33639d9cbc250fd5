#pragma once
/// @file
/// Vectorised row-wise softmax (chapter 00). Must match `tvlab::ref::softmax`.

#include <cstddef>

#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// @ingroup ch00
/// Same contract as `ref::softmax`; rows are processed in parallel, each row with xsimd
/// batches (max, exp and sum eight floats at a time on AVX2) in float instead of double.
Tensor2 softmax(const Tensor2& x);

/// @ingroup ch00
/// In-place stable softmax of one row of `n` floats; the building block of `softmax` and of
/// `opt::scaled_dot_product_attention`. A row of only -inf becomes zeros.
void softmax_row_inplace(float* row, std::size_t n);

}  // namespace tvlab::opt
