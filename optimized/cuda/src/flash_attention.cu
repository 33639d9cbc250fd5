// CUDA kernels of chapter 04: flash attention's forward pass, one thread per query row (v1) and
// tiled with key/value tiles staged in shared memory (v2), and its backward pass; all fp32. No
// xtensor here; the host-tensor wrappers are in flash_attention_host.cpp, the tensor-core
// version (v3) in flash_attention_tensor_core.cu.

#include "check.cuh"
#include "tvlab/cuda/flash_attention_device.hpp"

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
  unsigned long long tiles_visited = 0;  // counted as the loop runs, so the tests see the loop itself
  for (long long c0 = 0; c0 < key_end; c0 += bk) {
    ++tiles_visited;
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
  // One thread per block reports the block's tiles: those it visited, and the rest as skipped.
  if (threadIdx.x == 0 && a.tile_counts) {
    const unsigned long long all = static_cast<unsigned long long>((static_cast<long long>(a.seq_k) + bk - 1) / bk);
    atomicAdd(a.tile_counts, tiles_visited);
    atomicAdd(a.tile_counts + 1, all - tiles_visited);
  }
  if (!active) return;
  const long long row = h * static_cast<long long>(a.seq_q) + i;
  const bool seen = l > 0.0f;
  for (int e = 0; e < dv; ++e) a.out[row * dv + e] = seen ? o[e] / l : 0.0f;
  a.lse[row] = seen ? m + __logf(l) : -INFINITY;
}

// ------------------------------------------------------------------------------ backward

// D_i = sum_e dO_ie O_ie: one thread per query row.
__global__ void flash_backward_delta_kernel(FlashBackwardArgs a) {
  const long long row = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= static_cast<long long>(a.heads * a.seq_q)) return;
  const int dv = static_cast<int>(a.head_dim_v);
  float sum = 0.0f;
  for (int e = 0; e < dv; ++e) sum += a.dout[row * dv + e] * a.out[row * dv + e];
  a.delta[row] = sum;
}

// dK_j and dV_j: block (h, key tile) of block_k threads, thread j keeps k_j, v_j and its two
// gradients; shared memory holds a query tile: Q_i [block_q, d], dO_i [block_q, dv], L_i, D_i.
__global__ void __launch_bounds__(1024) flash_backward_dkdv_kernel(FlashBackwardArgs a) {
  extern __shared__ float stage[];
  const int d = static_cast<int>(a.head_dim), dv = static_cast<int>(a.head_dim_v);
  const int bq = static_cast<int>(a.block_q), bk = static_cast<int>(a.block_k);
  const long long seq_q = static_cast<long long>(a.seq_q), seq_k = static_cast<long long>(a.seq_k);
  const long long k_tiles = (seq_k + bk - 1) / bk;
  const long long h = blockIdx.x / k_tiles, c0 = (blockIdx.x % k_tiles) * bk;
  const long long j = c0 + threadIdx.x;  // this thread's key row (may be past the end)
  const bool active = j < seq_k;
  const long long shift = seq_k - seq_q;
  float* q_tile = stage;
  float* do_tile = q_tile + static_cast<long long>(bq) * d;
  float* lse_tile = do_tile + static_cast<long long>(bq) * dv;
  float* delta_tile = lse_tile + bq;
  float kj[kMaxHeadDim], vj[kMaxHeadDim], dk[kMaxHeadDim], dvj[kMaxHeadDim];
  for (int e = 0; e < d; ++e) {
    kj[e] = active ? a.k[(h * seq_k + j) * d + e] : 0.0f;
    dk[e] = 0.0f;
  }
  for (int e = 0; e < dv; ++e) {
    vj[e] = active ? a.v[(h * seq_k + j) * dv + e] : 0.0f;
    dvj[e] = 0.0f;
  }
  // Causal: query i sees key c0 only from i = c0 - shift on; the query tiles before it are skipped.
  const long long first_row = a.causal ? max(0LL, c0 - shift) : 0;
  for (long long r0 = first_row / bq * bq; r0 < seq_q; r0 += bq) {
    const int rows = static_cast<int>(min(static_cast<long long>(bq), seq_q - r0));
    const long long base = h * seq_q + r0;
    for (int t = threadIdx.x; t < rows * d; t += blockDim.x) q_tile[t] = a.q[base * d + t];
    for (int t = threadIdx.x; t < rows * dv; t += blockDim.x) do_tile[t] = a.dout[base * dv + t];
    for (int t = threadIdx.x; t < rows; t += blockDim.x) {
      lse_tile[t] = a.lse[base + t];
      delta_tile[t] = a.delta[base + t];
    }
    __syncthreads();
    if (active) {
      for (int r = 0; r < rows; ++r) {
        const long long i = r0 + r;
        if ((a.causal && j > i + shift) || lse_tile[r] == -INFINITY) continue;  // hidden, or a row that saw no key
        // P_ij = e^{S_ij - L_i}; dV_j += P_ij dO_i; dP_ij = dO_i . v_j; dS_ij = P_ij (dP_ij - D_i);
        // dK_j += scale dS_ij q_i.
        const float* qi = q_tile + static_cast<long long>(r) * d;
        const float* doi = do_tile + static_cast<long long>(r) * dv;
        float s = 0.0f, dp = 0.0f;
        for (int e = 0; e < d; ++e) s += qi[e] * kj[e];
        const float p = __expf(s * a.scale - lse_tile[r]);
        for (int e = 0; e < dv; ++e) {
          dvj[e] += p * doi[e];
          dp += doi[e] * vj[e];
        }
        const float ds = p * (dp - delta_tile[r]);
        for (int e = 0; e < d; ++e) dk[e] += a.scale * ds * qi[e];
      }
    }
    __syncthreads();  // the next query tile overwrites shared memory
  }
  if (!active) return;
  for (int e = 0; e < d; ++e) a.dk[(h * seq_k + j) * d + e] = dk[e];
  for (int e = 0; e < dv; ++e) a.dv[(h * seq_k + j) * dv + e] = dvj[e];
}

// dQ_i: block (h, query tile) of block_q threads, thread i keeps q_i, dO_i, L_i, D_i and dQ_i;
// shared memory holds K_j [block_k, d] then V_j [block_k, dv], as in the forward kernel.
__global__ void __launch_bounds__(1024) flash_backward_dq_kernel(FlashBackwardArgs a) {
  extern __shared__ float stage[];
  const int d = static_cast<int>(a.head_dim), dv = static_cast<int>(a.head_dim_v);
  const int bq = static_cast<int>(a.block_q), bk = static_cast<int>(a.block_k);
  const long long seq_q = static_cast<long long>(a.seq_q), seq_k = static_cast<long long>(a.seq_k);
  const long long q_tiles = (seq_q + bq - 1) / bq;
  const long long h = blockIdx.x / q_tiles, r0 = (blockIdx.x % q_tiles) * bq;
  const long long i = r0 + threadIdx.x;
  const long long row = h * seq_q + i;
  const long long shift = seq_k - seq_q;
  const bool active = i < seq_q;
  const float lse = active ? a.lse[row] : -INFINITY, delta = active ? a.delta[row] : 0.0f;
  const bool seen = lse != -INFINITY;  // a row that saw no key has no gradient
  float* k_tile = stage;
  float* v_tile = stage + static_cast<long long>(bk) * d;
  float qi[kMaxHeadDim], doi[kMaxHeadDim], dq[kMaxHeadDim];
  for (int e = 0; e < d; ++e) {
    qi[e] = seen ? a.q[row * d + e] : 0.0f;
    dq[e] = 0.0f;
  }
  for (int e = 0; e < dv; ++e) doi[e] = seen ? a.dout[row * dv + e] : 0.0f;
  const long long last_row = min(r0 + bq, seq_q) - 1;
  const long long key_end = a.causal ? min(seq_k, last_row + shift + 1) : seq_k;
  for (long long c0 = 0; c0 < key_end; c0 += bk) {
    const int cols = static_cast<int>(min(static_cast<long long>(bk), seq_k - c0));
    for (int t = threadIdx.x; t < cols * d; t += blockDim.x) k_tile[t] = a.k[(h * seq_k + c0) * d + t];
    for (int t = threadIdx.x; t < cols * dv; t += blockDim.x) v_tile[t] = a.v[(h * seq_k + c0) * dv + t];
    __syncthreads();
    if (seen) {
      const int visible = a.causal ? static_cast<int>(max(0LL, min(static_cast<long long>(cols), i + shift + 1 - c0))) : cols;
      for (int c = 0; c < visible; ++c) {
        // P_ij, dP_ij and dS_ij as in the dK/dV pass; dQ_i += scale dS_ij k_j.
        const float* kc = k_tile + static_cast<long long>(c) * d;
        const float* vc = v_tile + static_cast<long long>(c) * dv;
        float s = 0.0f, dp = 0.0f;
        for (int e = 0; e < d; ++e) s += qi[e] * kc[e];
        for (int e = 0; e < dv; ++e) dp += doi[e] * vc[e];
        const float ds = __expf(s * a.scale - lse) * (dp - delta);
        for (int e = 0; e < d; ++e) dq[e] += a.scale * ds * kc[e];
      }
    }
    __syncthreads();
  }
  if (!active) return;
  for (int e = 0; e < d; ++e) a.dq[row * d + e] = dq[e];
}

}  // namespace

void flash_forward_rowwise(const FlashArgs& a) {
  const long long rows = static_cast<long long>(a.heads * a.seq_q);
  constexpr int kThreads = 128;
  flash_rowwise_kernel<<<static_cast<unsigned>((rows + kThreads - 1) / kThreads), kThreads>>>(a);
  TVLAB_CUDA_CHECK(cudaGetLastError());
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

void flash_backward(const FlashBackwardArgs& a) {
  const long long rows = static_cast<long long>(a.heads * a.seq_q);
  constexpr int kThreads = 128;
  flash_backward_delta_kernel<<<static_cast<unsigned>((rows + kThreads - 1) / kThreads), kThreads>>>(a);
  TVLAB_CUDA_CHECK(cudaGetLastError());
  const std::size_t dkdv_shared = flash_backward_dkdv_shared_bytes(a), dq_shared = flash_backward_dq_shared_bytes(a);
  TVLAB_CUDA_CHECK(cudaFuncSetAttribute(flash_backward_dkdv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(dkdv_shared)));
  TVLAB_CUDA_CHECK(cudaFuncSetAttribute(flash_backward_dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(dq_shared)));
  const std::size_t k_tiles = (a.seq_k + a.block_k - 1) / a.block_k, q_tiles = (a.seq_q + a.block_q - 1) / a.block_q;
  flash_backward_dkdv_kernel<<<static_cast<unsigned>(a.heads * k_tiles), static_cast<unsigned>(a.block_k), dkdv_shared>>>(a);
  TVLAB_CUDA_CHECK(cudaGetLastError());
  flash_backward_dq_kernel<<<static_cast<unsigned>(a.heads * q_tiles), static_cast<unsigned>(a.block_q), dq_shared>>>(a);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tvlab::cuda::device
