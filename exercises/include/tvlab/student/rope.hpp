#pragma once
/// @file
/// Exercise 02.1: your RoPE. Same contract as `tvlab::ref::apply_rope`.

#include "tvlab/core/rope_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::student {

/// @ingroup ch02
Tensor3 apply_rope(const Tensor3& x, const RopeFrequencies& freqs, RopeLayout layout, long long position_offset = 0);

}  // namespace tvlab::student
