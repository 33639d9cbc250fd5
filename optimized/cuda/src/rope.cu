// CUDA kernel of chapter 02: RoPE applied in place, both layouts. No xtensor here; the
// host-tensor wrapper and the cos/sin table are in rope_host.cpp.

#include "check.cuh"
#include "tvlab/cuda/rope_device.hpp"

namespace tvlab::cuda::device {
namespace {

constexpr int kThreads = 256;

// pairs <= head_dim / 2: with fewer, only the first 2 * pairs coordinates of a row rotate.
__global__ void rope_kernel(float* x, long long total_pairs, int seq, int head_dim, int pairs, const float* cos_table,
                            const float* sin_table, bool interleaved) {
  for (long long p = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; p < total_pairs;
       p += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long row = p / pairs;
    const int i = static_cast<int>(p % pairs);
    const int t = static_cast<int>(row % seq);
    float* r = x + row * head_dim;
    const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + pairs;
    const float c = cos_table[static_cast<long long>(t) * pairs + i], s = sin_table[static_cast<long long>(t) * pairs + i];
    const float xa = r[a], xb = r[b];
    r[a] = xa * c - xb * s;
    r[b] = xa * s + xb * c;
  }
}

}  // namespace

void apply_rope_inplace(float* x, std::size_t rows, std::size_t seq, std::size_t head_dim, std::size_t pairs,
                        const float* cos, const float* sin, bool interleaved) {
  const long long total_pairs = static_cast<long long>(rows * pairs);
  if (total_pairs == 0) return;
  rope_kernel<<<detail::grid_stride_blocks(static_cast<std::size_t>(total_pairs), kThreads), kThreads>>>(
      x, total_pairs, static_cast<int>(seq), static_cast<int>(head_dim), static_cast<int>(pairs), cos, sin, interleaved);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tvlab::cuda::device
