#pragma once
// What chapter 06's state kernels share (linear_attention.cu, delta_rule.cu): the columns of a state
// S [rows, d_v] are independent (every step mixes its rows, never its columns), so a thread block
// owns 32 of them, all rows, in shared memory. Its 128 threads are 4 warps; lane l holds column l
// of the block and warp w the rows c = w, w + 4, ...: each thread touches the same elements of the
// shared S at every step, and only sums over rows cross warps. Grid: (head, block of 32 columns).

#include <cstddef>

#include "check.cuh"

namespace tvlab::cuda::device::state_columns {

constexpr int kColumns = 32;  // value columns per thread block: one per lane
constexpr int kWarps = 4;
constexpr int kThreads = kColumns * kWarps;

// This thread's lane and warp, the global column its lane holds, and whether that column exists
// (the last block of a d_v that is not a multiple of 32 has idle lanes, whose column stays 0).
struct Position {
  int lane, warp;
  std::size_t col;
  bool has_col;
};
__device__ inline Position position(std::size_t d_v) {
  const int lane = threadIdx.x % kColumns, warp = threadIdx.x / kColumns;
  const std::size_t col = blockIdx.y * kColumns + lane;
  return {lane, warp, col, col < d_v};
}

// The block's columns of one head's state s_head [rows, d_v] into the shared S [rows][32].
__device__ inline void load(float* S, const float* s_head, int rows, std::size_t d_v, const Position& p) {
  for (int c = p.warp; c < rows; c += kWarps) S[c * kColumns + p.lane] = p.has_col ? s_head[c * d_v + p.col] : 0.0f;
}

// The shared S [rows][32] back into the block's columns of s_head.
__device__ inline void store(float* s_head, const float* S, int rows, std::size_t d_v, const Position& p) {
  for (int c = p.warp; c < rows; c += kWarps)
    if (p.has_col) s_head[c * d_v + p.col] = S[c * kColumns + p.lane];
}

// Launches `kernel` over (heads, column blocks of d_v) with `bytes` of dynamic shared memory (above
// 48 KB a kernel must ask for it).
template <class Args>
void launch(void (*kernel)(Args), std::size_t heads, std::size_t d_v, std::size_t bytes, const Args& args) {
  TVLAB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>(heads), static_cast<unsigned>((d_v + kColumns - 1) / kColumns));
  kernel<<<grid, kThreads, bytes>>>(args);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tvlab::cuda::device::state_columns
