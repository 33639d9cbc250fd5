#pragma once
/// @file
/// Exercise 02.1: your RoPE, and exercise 02.3: the inverse frequencies of the context-extension
/// methods. Same contracts as `tvlab::ref::apply_rope` and `tvlab::ref::rope_frequencies`.

#include "tvlab/core/rope_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::student {

/// @ingroup ch02
Tensor3 apply_rope(const Tensor3& x, const RopeFrequencies& freqs, RopeLayout layout, long long position_offset = 0);
/// @ingroup ch02
RopeFrequencies rope_frequencies(const RopeConfig& cfg, long long seq_len = 0);

}  // namespace tvlab::student
