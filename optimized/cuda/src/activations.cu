// CUDA elementwise kernel of chapter 01's activations: f(x + bias) in place, alone (no bias) and
// as the epilogue of the FFN's first product. No xtensor here; the host-tensor wrappers are in
// activations_host.cpp.

#include "check.cuh"
#include "tvlab/cuda/activations_device.hpp"

namespace tvlab::cuda::device {
namespace {

constexpr int kThreads = 256;

__device__ inline float apply(Activation f, float v) {
  switch (f) {
    case Activation::relu: return v > 0.0f ? v : 0.0f;
    case Activation::gelu: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    case Activation::gelu_tanh: return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    case Activation::silu: return v / (1.0f + expf(-v));
  }
  return v;
}

__global__ void bias_activation_kernel(Activation f, float* x, const float* bias, long long n, int cols) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    x[i] = apply(f, x[i] + (bias ? bias[i % cols] : 0.0f));
  }
}

}  // namespace

void bias_activation_inplace(Activation f, float* x, const float* bias, std::size_t rows, std::size_t cols) {
  const std::size_t n = rows * cols;
  if (n == 0) return;
  bias_activation_kernel<<<detail::grid_stride_blocks(n, kThreads), kThreads>>>(f, x, bias, static_cast<long long>(n),
                                                                                 static_cast<int>(cols));
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

void activation_inplace(Activation f, float* x, std::size_t n) { bias_activation_inplace(f, x, nullptr, 1, n); }

}  // namespace tvlab::cuda::device
