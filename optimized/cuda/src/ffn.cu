// CUDA elementwise kernel of chapter 01's FFN: the SwiGLU combine SiLU(gate) * up. The products
// are cuBLAS SGEMMs (blas.cu) and the bias + activation epilogue is in activations.cu. No
// xtensor here; the host-tensor wrappers are in ffn_host.cpp.

#include "check.cuh"
#include "tvlab/cuda/ffn_device.hpp"

namespace tvlab::cuda::device {
namespace {

constexpr int kThreads = 256;

__global__ void swiglu_kernel(const float* gate, const float* up, float* out, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

}  // namespace

void swiglu_combine(const float* gate, const float* up, float* out, std::size_t n) {
  if (n == 0) return;
  swiglu_kernel<<<detail::grid_stride_blocks(n, kThreads), kThreads>>>(gate, up, out, static_cast<long long>(n));
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tvlab::cuda::device
