#pragma once
/// @file
/// CUDA RoPE (chapter 02), host tensors in and out. Must match `tvlab::ref::apply_rope`.

#include "tvlab/core/rope_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::cuda {

/// @ingroup ch02
/// The cos/sin table is built on the host in double (`opt::make_rope_cache`) and uploaded; the
/// kernel rotates every pair in place, one thread per pair.
Tensor3 apply_rope(const Tensor3& x, const RopeFrequencies& freqs, RopeLayout layout, long long position_offset = 0);

}  // namespace tvlab::cuda
