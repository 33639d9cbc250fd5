#pragma once
// What every .cu file of the CUDA backend shares: error checking for CUDA runtime calls (a failed
// call throws std::runtime_error naming the call, file and line: device errors are not bad
// input), the grid size of a grid-stride loop, and block-wide reductions. cuBLAS's own check is
// in blas.cu, the only file that calls cuBLAS.

#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#define TVLAB_CUDA_CHECK(call)                                                                          \
  do {                                                                                                  \
    const cudaError_t tvlab_status = (call);                                                            \
    if (tvlab_status != cudaSuccess)                                                                    \
      throw std::runtime_error(std::string("CUDA error in ") + #call + " at " + __FILE__ + ":" +        \
                               std::to_string(__LINE__) + ": " + cudaGetErrorString(tvlab_status));     \
  } while (0)

namespace tvlab::cuda::detail {

/// Blocks of `threads` for a grid-stride loop over n elements: enough to cover n, at least 1,
/// and at most 65535 (the loop covers the rest).
inline unsigned grid_stride_blocks(std::size_t n, int threads) {
  const std::size_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks ? blocks : 1) : 65535);
}

/// Sum / max over a thread block, by warp shuffles then one shared-memory round.
/// `scratch` must hold 32 values of T. Every thread gets the result.
template <class T>
__device__ inline T warp_sum(T x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}
__device__ inline float warp_max(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}
template <class T>
__device__ inline T block_sum(T x, T* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
  x = warp_sum(x);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = (lane < warps) ? scratch[lane] : T(0);
  return warp_sum(x);
}
__device__ inline float block_max(float x, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
  x = warp_max(x);
  __syncthreads();
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = (lane < warps) ? scratch[lane] : -INFINITY;
  return warp_max(x);
}

}  // namespace tvlab::cuda::detail
