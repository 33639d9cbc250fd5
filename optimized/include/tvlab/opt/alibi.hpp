#pragma once
/// @file
/// ALiBi (chapter 02). Must match `tvlab::ref::alibi_bias`.

#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/alibi.hpp"

namespace tvlab::opt {

// The slopes are num_heads numbers: the reference's function serves under the same name.
using ref::alibi_slopes;
using ref::AlibiMode;
using ref::validate_alibi;

/// @ingroup ch02
/// Same contract as `ref::alibi_bias`; heads and rows in parallel, each row one vectorised loop
/// over the keys (the bias is an affine function of j).
Tensor3 alibi_bias(int num_heads, long long seq_q, long long seq_k, AlibiMode mode);

}  // namespace tvlab::opt
