#pragma once
/// @file
/// Device-pointer entry points of chapter 04's flash attention (no xtensor here).

#include <cstddef>

namespace tvlab::cuda::device {

/// Arguments of the flash forward kernels. All pointers are device memory, row-major.
struct FlashArgs {
  const float* q = nullptr;  ///< [heads, seq_q, head_dim]
  const float* k = nullptr;  ///< [heads, seq_k, head_dim]
  const float* v = nullptr;  ///< [heads, seq_k, head_dim_v]
  float* out = nullptr;      ///< [heads, seq_q, head_dim_v]
  float* lse = nullptr;      ///< [heads, seq_q]
  std::size_t heads = 0, seq_q = 0, seq_k = 0, head_dim = 0, head_dim_v = 0;
  std::size_t block_q = 64, block_k = 64;  ///< tile sizes (tiled kernel)
  float scale = 1.0f;
  bool causal = false;
  unsigned long long* tile_counts = nullptr;  ///< optional [2]: tiles computed, tiles skipped (tiled kernel)
};

/// Version 1: one thread per query row, walking every key with the online softmax; q and the
/// output accumulator in per-thread arrays (local memory). The simplest correct kernel.
void flash_forward_rowwise(const FlashArgs& args);

/// Version 2: one thread block per (head, query tile of `block_q` rows), one thread per query
/// row; the block stages each key/value tile of `block_k` rows in shared memory once for all its
/// rows (block_k (head_dim + head_dim_v) floats), skips tiles the causal mask hides, keeps m and l
/// in registers and q and the output accumulator in per-thread arrays (local memory), and adds
/// its tile counts to `tile_counts`. fp32 throughout. block_q <= 1024.
void flash_forward_tiled(const FlashArgs& args);

/// The shared memory the tiled kernel needs for these arguments, and the most a block may use.
std::size_t flash_tiled_shared_bytes(const FlashArgs& args);
std::size_t max_shared_bytes_per_block();

}  // namespace tvlab::cuda::device
