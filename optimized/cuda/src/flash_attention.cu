// CUDA kernels of chapter 04: flash attention's forward pass, one thread per query row (v1) and
// tiled with key/value tiles staged in shared memory (v2). No xtensor here; the host-tensor
// wrapper is in flash_host.cpp.

#include "check.cuh"
#include "tvlab/cuda/flash_device.hpp"

namespace tvlab::cuda::device {
namespace {

constexpr int kMaxHeadDim = 256;  // as FlashConfig: head_dim, head_dim_v <= 256

// v1: thread (h, i) walks keys j = 0 .. last visible with the online softmax.
__global__ void flash_rowwise_kernel(FlashArgs a) {
  const long long row = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= static_cast<long long>(a.heads * a.seq_q)) return;
  const long long h = row / static_cast<long long>(a.seq_q), i = row % static_cast<long long>(a.seq_q);
  const int d = static_cast<int>(a.head_dim), dv = static_cast<int>(a.head_dim_v);
  float q[kMaxHeadDim], o[kMaxHeadDim];
  for (int e = 0; e < d; ++e) q[e] = a.q[row * d + e];
  for (int e = 0; e < dv; ++e) o[e] = 0.0f;
  const long long last = a.causal ? i + static_cast<long long>(a.seq_k - a.seq_q) : static_cast<long long>(a.seq_k) - 1;
  float m = -INFINITY, l = 0.0f;
  for (long long j = 0; j <= last; ++j) {
    const float* kj = a.k + (h * static_cast<long long>(a.seq_k) + j) * d;
    float s = 0.0f;
    for (int e = 0; e < d; ++e) s += q[e] * kj[e];
    s *= a.scale;
    // m' = max(m, s); l and O~ rescaled by e^{m - m'}; then add e^{s - m'} (v_j).
    const float m_new = fmaxf(m, s);
    const float correction = m == -INFINITY ? 0.0f : __expf(m - m_new);
    const float p = __expf(s - m_new);
    l = l * correction + p;
    const float* vj = a.v + (h * static_cast<long long>(a.seq_k) + j) * dv;
    for (int e = 0; e < dv; ++e) o[e] = o[e] * correction + p * vj[e];
    m = m_new;
  }
  const bool seen = l > 0.0f;
  for (int e = 0; e < dv; ++e) a.out[row * dv + e] = seen ? o[e] / l : 0.0f;
  a.lse[row] = seen ? m + __logf(l) : -INFINITY;
}

// v2: block (h, tile) of block_q threads; shared memory holds K_j [block_k, d] then V_j [block_k, dv].
__global__ void __launch_bounds__(1024) flash_tiled_kernel(FlashArgs a) {
  extern __shared__ float tile[];
  const int d = static_cast<int>(a.head_dim), dv = static_cast<int>(a.head_dim_v);
  const int bq = static_cast<int>(a.block_q), bk = static_cast<int>(a.block_k);
  const long long q_tiles = (static_cast<long long>(a.seq_q) + bq - 1) / bq;
  const long long h = blockIdx.x / q_tiles, r0 = (blockIdx.x % q_tiles) * bq;
  const long long i = r0 + threadIdx.x;  // this thread's query row (may be past the end)
  const bool active = i < static_cast<long long>(a.seq_q);
  const long long shift = static_cast<long long>(a.seq_k) - static_cast<long long>(a.seq_q);
  float* k_tile = tile;
  float* v_tile = tile + static_cast<long long>(bk) * d;
  float q[kMaxHeadDim], o[kMaxHeadDim];
  if (active)
    for (int e = 0; e < d; ++e) q[e] = a.q[((h * static_cast<long long>(a.seq_q)) + i) * d + e];
  for (int e = 0; e < dv; ++e) o[e] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  // The tile's last query sees keys up to last_row + shift: later key tiles are skipped whole.
  const long long last_row = min(r0 + bq, static_cast<long long>(a.seq_q)) - 1;
  const long long key_end = a.causal ? min(static_cast<long long>(a.seq_k), last_row + shift + 1)
                                     : static_cast<long long>(a.seq_k);
  for (long long c0 = 0; c0 < key_end; c0 += bk) {
    const int cols = static_cast<int>(min(static_cast<long long>(bk), static_cast<long long>(a.seq_k) - c0));
    // Stage K_j and V_j: every thread of the block copies a strided share.
    const float* kg = a.k + (h * static_cast<long long>(a.seq_k) + c0) * d;
    const float* vg = a.v + (h * static_cast<long long>(a.seq_k) + c0) * dv;
    for (int t = threadIdx.x; t < cols * d; t += blockDim.x) k_tile[t] = kg[t];
    for (int t = threadIdx.x; t < cols * dv; t += blockDim.x) v_tile[t] = vg[t];
    __syncthreads();
    if (active) {
      const int visible = a.causal ? static_cast<int>(max(0LL, min(static_cast<long long>(cols), i + shift + 1 - c0)))
                                   : cols;
      for (int c = 0; c < visible; ++c) {
        float s = 0.0f;
        for (int e = 0; e < d; ++e) s += q[e] * k_tile[c * d + e];
        s *= a.scale;
        const float m_new = fmaxf(m, s);
        const float correction = m == -INFINITY ? 0.0f : __expf(m - m_new);
        const float p = __expf(s - m_new);
        l = l * correction + p;
        for (int e = 0; e < dv; ++e) o[e] = o[e] * correction + p * v_tile[c * dv + e];
        m = m_new;
      }
    }
    __syncthreads();  // the next tile overwrites shared memory
  }
  // One thread per block reports the block's tiles: computed up to key_end, the rest skipped.
  if (threadIdx.x == 0 && a.tile_counts) {
    const unsigned long long computed = static_cast<unsigned long long>((key_end + bk - 1) / bk);
    const unsigned long long all = static_cast<unsigned long long>((static_cast<long long>(a.seq_k) + bk - 1) / bk);
    atomicAdd(a.tile_counts, computed);
    atomicAdd(a.tile_counts + 1, all - computed);
  }
  if (!active) return;
  const long long row = h * static_cast<long long>(a.seq_q) + i;
  const bool seen = l > 0.0f;
  for (int e = 0; e < dv; ++e) a.out[row * dv + e] = seen ? o[e] / l : 0.0f;
  a.lse[row] = seen ? m + __logf(l) : -INFINITY;
}

}  // namespace

void flash_forward_rowwise(const FlashArgs& a) {
  const long long rows = static_cast<long long>(a.heads * a.seq_q);
  constexpr int kThreads = 128;
  flash_rowwise_kernel<<<static_cast<unsigned>((rows + kThreads - 1) / kThreads), kThreads>>>(a);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

std::size_t flash_tiled_shared_bytes(const FlashArgs& a) { return a.block_k * (a.head_dim + a.head_dim_v) * sizeof(float); }

std::size_t max_shared_bytes_per_block() {
  int device = 0, bytes = 0;
  TVLAB_CUDA_CHECK(cudaGetDevice(&device));
  TVLAB_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return static_cast<std::size_t>(bytes);
}

void flash_forward_tiled(const FlashArgs& a) {
  const std::size_t shared = flash_tiled_shared_bytes(a);
  // Beyond 48 KiB a kernel must opt in to the larger shared memory of sm_80 / sm_90.
  TVLAB_CUDA_CHECK(cudaFuncSetAttribute(flash_tiled_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(shared)));
  const std::size_t q_tiles = (a.seq_q + a.block_q - 1) / a.block_q;
  flash_tiled_kernel<<<static_cast<unsigned>(a.heads * q_tiles), static_cast<unsigned>(a.block_q), shared>>>(a);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tvlab::cuda::device
