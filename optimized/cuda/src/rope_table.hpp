#pragma once
// The cos/sin table of RoPE on the device, shared by `cuda::apply_rope` and the attention run
// with RoPE (chapter 02). Host code only (no CUDA headers); defined in rope_host.cpp.

#include <cstddef>

#include "tvlab/core/rope_config.hpp"
#include "tvlab/cuda/runtime.hpp"

namespace tvlab::cuda::detail {

/// cos and sin of \f$ m\theta_i \f$ (times `freqs.attention_factor`) for the positions
/// m = first_position .. first_position + count - 1, computed on the host in double (angles
/// m theta reach 1e5 rad and more, where float would lose the phase), stored as float
/// `[count, pairs]` with pairs = the length of `freqs.inv_freq` (head_dim / 2 unless only part of each
/// head rotates), and uploaded. The frequencies are already checked
/// (`validate_rope_input`, `validate_attention_rope`); the table checks that the largest angle is
/// finite (cos and sin of inf are NaN) and throws `tvlab::Error` naming `function` otherwise.
struct DeviceRopeTable {
  DeviceRopeTable(const char* function, const RopeFrequencies& freqs, long long first_position, std::size_t count);

  /// The table rows from position first_position + row on, as `device::apply_rope_inplace` takes them.
  const float* cos_from(std::size_t row) const { return cos.get() + row * pairs; }
  const float* sin_from(std::size_t row) const { return sin.get() + row * pairs; }

  std::size_t pairs = 0;
  DeviceBuffer<float> cos, sin;
};

}  // namespace tvlab::cuda::detail
