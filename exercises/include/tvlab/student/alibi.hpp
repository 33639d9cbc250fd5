#pragma once
/// @file
/// Exercise 02.2: your ALiBi bias, slopes included. Same contract as `tvlab::ref::alibi_bias`.

#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/alibi.hpp"

namespace tvlab::student {

using ref::AlibiMode;

/// @ingroup ch02
Tensor3 alibi_bias(int num_heads, long long seq_q, long long seq_k, AlibiMode mode);

}  // namespace tvlab::student
