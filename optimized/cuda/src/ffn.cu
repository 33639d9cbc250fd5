// CUDA elementwise kernels of chapter 01: activations, bias + activation epilogue, SwiGLU combine.

#include "check.cuh"
#include "tvlab/cuda/ffn_device.hpp"

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

__global__ void swiglu_kernel(const float* gate, const float* up, float* out, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

unsigned grid_for(std::size_t n) {
  const std::size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks ? blocks : 1) : 65535);  // grid-stride loop covers the rest
}

}  // namespace

void bias_activation_inplace(Activation f, float* x, const float* bias, std::size_t rows, std::size_t cols) {
  const std::size_t n = rows * cols;
  if (n == 0) return;
  bias_activation_kernel<<<grid_for(n), kThreads>>>(f, x, bias, static_cast<long long>(n), static_cast<int>(cols));
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

void activation_inplace(Activation f, float* x, std::size_t n) { bias_activation_inplace(f, x, nullptr, 1, n); }

void swiglu_combine(const float* gate, const float* up, float* out, std::size_t n) {
  if (n == 0) return;
  swiglu_kernel<<<grid_for(n), kThreads>>>(gate, up, out, static_cast<long long>(n));
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tvlab::cuda::device
