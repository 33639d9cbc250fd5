#pragma once
/// @file
/// Rotary position embeddings with a precomputed cos/sin cache (chapter 02).
/// Must match `tvlab::ref::apply_rope`.

#include <cstddef>
#include <vector>

#include "tvlab/core/rope_config.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/rope.hpp"

namespace tvlab::opt {

// The frequencies are configuration arithmetic on d/2 numbers: nothing to optimize, so the
// optimized side uses the reference's functions under the same names.
using ref::ntk_aware_base;
using ref::rope_frequencies;

/// @ingroup ch02
/// cos and sin of \f$ m\theta_i \f$ (times the attention factor) for positions
/// \f$ m \in [\text{first}, \text{first} + \text{count}) \f$, computed once in double and stored as float
/// `[count, pairs]` (pairs = the length of `inv_freq`, head_dim / 2 unless only part of each head
/// rotates): applying RoPE then costs four multiplications per pair, no trigonometry.
struct RopeCache {
  long long first_position = 0;
  std::size_t positions = 0, pairs = 0;
  std::vector<float> cos, sin;
};

/// @ingroup ch02
/// Builds the cache; throws `tvlab::Error` for count <= 0, first < 0 or non-finite frequencies.
RopeCache make_rope_cache(const RopeFrequencies& freqs, long long first_position, long long count);

/// @ingroup ch02
/// Rotates x `[heads, seq, head_dim]` in place using positions first_position + row from
/// `cache` (which must cover them); a cache of fewer than head_dim / 2 pairs rotates only the first
/// 2 * pairs coordinates of each row. Rows run in parallel; the half_split layout's pairs are two
/// contiguous halves and vectorise directly, the interleaved layout's are even/odd lanes.
/// x is checked for inf/NaN, and the result for overflow, in the same pass (one read of memory, not
/// two): on a non-finite value the `tvlab::Error` naming `x` is thrown after the pass, and x then
/// holds rotated values.
void apply_rope_inplace(Tensor3& x, const RopeCache& cache, RopeLayout layout, long long position_offset = 0);

/// @ingroup ch02
/// Same contract as `ref::apply_rope`: builds the cache for the rows' positions, then
/// `apply_rope_inplace` on a copy.
Tensor3 apply_rope(const Tensor3& x, const RopeFrequencies& freqs, RopeLayout layout, long long position_offset = 0);

}  // namespace tvlab::opt
