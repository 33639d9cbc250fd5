#pragma once
// One row of RoPE from a cos/sin cache row: shared by opt::apply_rope and by attention, which
// rotates q and k while copying them into its working buffers.

#include <cstddef>

#include "tvlab/core/rope_config.hpp"

namespace tvlab::opt::detail {

/// Rotates the `pairs` pairs of one row `in` into `out` (which may be `in`), (i, i + pairs) or
/// (2i, 2i + 1), so with pairs < head_dim / 2 only the first 2 * pairs coordinates (the caller
/// copies the others when `out` is not `in`): pair i by the angle
/// whose cosine and sine (times the attention factor) are `cos[i]`, `sin[i]`. Returns
/// \f$ \sum_j 0 \cdot x_j + 0 \cdot x'_j \f$: 0 when every input and output is finite, NaN otherwise
/// (inf * 0 and NaN * 0 are NaN), so a caller can check its input, and overflow of its output,
/// in the same pass.
inline float rotate_row(const float* in, float* out, const float* cos, const float* sin, std::size_t pairs,
                        RopeLayout layout) {
  float probe = 0.0f;
  if (layout == RopeLayout::half_split) {
    // (x_i, x_{i+d/2}) -> (x_i c_i - x_{i+d/2} s_i, x_i s_i + x_{i+d/2} c_i): two contiguous halves.
#pragma omp simd reduction(+ : probe)
    for (std::size_t i = 0; i < pairs; ++i) {
      const float xa = in[i], xb = in[i + pairs];
      const float ya = xa * cos[i] - xb * sin[i], yb = xa * sin[i] + xb * cos[i];
      out[i] = ya;
      out[i + pairs] = yb;
      probe += (xa * 0.0f + xb * 0.0f) + (ya * 0.0f + yb * 0.0f);
    }
  } else {
    // (x_{2i}, x_{2i+1}): even and odd lanes.
#pragma omp simd reduction(+ : probe)
    for (std::size_t i = 0; i < pairs; ++i) {
      const float xa = in[2 * i], xb = in[2 * i + 1];
      const float ya = xa * cos[i] - xb * sin[i], yb = xa * sin[i] + xb * cos[i];
      out[2 * i] = ya;
      out[2 * i + 1] = yb;
      probe += (xa * 0.0f + xb * 0.0f) + (ya * 0.0f + yb * 0.0f);
    }
  }
  return probe;
}

}  // namespace tvlab::opt::detail
