#pragma once
/// @file
/// Device-pointer entry point of chapter 02's RoPE (no xtensor here).

#include <cstddef>

namespace tvlab::cuda::device {

/// Rotates x `[rows, head_dim]` in place (rows = heads * seq, position of row r = first + r % seq)
/// with a cos/sin table `[positions, head_dim / 2]` whose row 0 is position `first`. One thread
/// per pair; `interleaved` selects pairs (2i, 2i+1), otherwise (i, i + head_dim/2).
void apply_rope_inplace(float* x, std::size_t rows, std::size_t seq, std::size_t head_dim, const float* cos,
                        const float* sin, bool interleaved);

}  // namespace tvlab::cuda::device
