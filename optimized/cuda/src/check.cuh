#pragma once
// Error checking for CUDA runtime and cuBLAS calls: a failed call throws tvlab::Error-like
// std::runtime_error naming the call, file and line (device errors are not bad input).

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#define TVLAB_CUDA_CHECK(call)                                                                          \
  do {                                                                                                  \
    const cudaError_t tvlab_status = (call);                                                            \
    if (tvlab_status != cudaSuccess)                                                                    \
      throw std::runtime_error(std::string("CUDA error in ") + #call + " at " + __FILE__ + ":" +        \
                               std::to_string(__LINE__) + ": " + cudaGetErrorString(tvlab_status));     \
  } while (0)

#define TVLAB_CUBLAS_CHECK(call)                                                                        \
  do {                                                                                                  \
    const cublasStatus_t tvlab_status = (call);                                                         \
    if (tvlab_status != CUBLAS_STATUS_SUCCESS)                                                          \
      throw std::runtime_error(std::string("cuBLAS error ") + std::to_string(static_cast<int>(tvlab_status)) + \
                               " in " + #call + " at " + __FILE__ + ":" + std::to_string(__LINE__));    \
  } while (0)

namespace tvlab::cuda::detail {

/// One cuBLAS handle per process, created on first use.
cublasHandle_t cublas_handle();

/// Sum / max over a thread block, by warp shuffles then one shared-memory round.
/// `scratch` must hold 32 floats. Every thread gets the result.
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
