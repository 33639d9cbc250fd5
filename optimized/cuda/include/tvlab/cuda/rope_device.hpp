#pragma once
/// @file
/// Device-pointer entry point of chapter 02's RoPE (no xtensor here).

#include <cstddef>

namespace tvlab::cuda::device {

/// Rotates x `[rows, head_dim]` in place (rows = heads * seq, position of row r = first + r % seq)
/// with a cos/sin table `[positions, pairs]` whose row 0 is position `first`. One thread per pair;
/// `interleaved` selects pairs (2i, 2i+1), otherwise (i, i + pairs). pairs is head_dim / 2, or fewer
/// when only the first 2 * pairs coordinates rotate (the others are not touched).
void apply_rope_inplace(float* x, std::size_t rows, std::size_t seq, std::size_t head_dim, std::size_t pairs,
                        const float* cos, const float* sin, bool interleaved);

}  // namespace tvlab::cuda::device
