#pragma once
/// @file
/// Vectorised row-wise softmax (chapter 00). Must match `tvlab::ref::softmax`.

#include <cstddef>

#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// @ingroup ch00
/// Same contract as `ref::softmax`; rows are processed in parallel, each row with xsimd
/// batches (max, exp and sum 8 or 16 floats at a time) in float instead of double. x is read
/// once: NaN and +inf are detected through the row sums, not by a separate scan, so unlike the
/// other functions it reports bad input after computing (the output is then discarded).
Tensor2 softmax(const Tensor2& x);

/// @ingroup ch00
/// Stable softmax of one row of `n` floats from `x` into `y` (they may be the same). A row of
/// only -inf becomes zeros. Returns false, leaving `y` unspecified, when the row holds a NaN or
/// +inf.
bool softmax_row(const float* x, float* y, std::size_t n);

/// @ingroup ch00
/// `softmax_row(row, row, n)`: the building block of `opt::scaled_dot_product_attention`, whose
/// scores are finite because `validate_attention` bounds them below float's range.
void softmax_row_inplace(float* row, std::size_t n);

}  // namespace tvlab::opt
