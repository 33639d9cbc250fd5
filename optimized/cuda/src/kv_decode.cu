// CUDA kernels of chapter 05's decode step: split-K flash-decoding (FlashDecoding, Dao et al.,
// 2023; the two-pass structure of vLLM's PagedAttention v2 kernel), GQA-aware, fp32. No xtensor
// here; the host-tensor wrappers are in kv_decode_host.cpp.

#include "check.cuh"
#include "tvlab/cuda/kv_decode_device.hpp"

namespace tvlab::cuda::device {
namespace {

// Where the rows of kv head g at position t lie (see DecodeArgs): the only difference between the
// contiguous and the paged cache, a template parameter of the kernel.
struct ContiguousRows {
  long long capacity;
  __device__ long long operator()(long long g, long long t) const { return g * capacity + t; }
};
struct PagedRows {
  const unsigned long long* block_table;
  long long kv_heads, block_size;
  // Block T[t / b], kv head g, slot t mod b of the pool [num_blocks, kv_heads, block_size, .].
  __device__ long long operator()(long long g, long long t) const {
    const long long block = static_cast<long long>(block_table[t / block_size]);
    return (block * kv_heads + g) * block_size + t % block_size;
  }
};

// ------------------------------------------------------------------------------ split kernel

// Thread mapping. Grid (splits, kv_heads, head chunks); block (s, g, c) serves the positions
// [s L_s, min(n, (s + 1) L_s)) of kv head g (L_s = split_length) for the query heads
// g (h/g) + c H_b + r, r < hb = min(H_b, h/g - c H_b). 256 threads. Shared memory, in this order:
// Q [H_b, d], O~ [H_b, d_v], P [H_b, T], m, l, corr [H_b], K [T, pitch], V [T, d_v] (absent when the
// values are the keys' first columns). Every loop bound and every branch around a __syncthreads
// depends on the block alone, so every thread reaches every barrier. Each thread block reads each
// of its keys and values from global memory once, for all hb query heads.
template <class Rows>
__global__ void __launch_bounds__(kDecodeThreads) decode_split_kernel(DecodeArgs a, Rows rows) {
  extern __shared__ float shared[];
  // Indices within the block's shared arrays fit in int (they index at most 227 KiB); positions,
  // rows and heads of the cache are long long.
  const int d = static_cast<int>(a.head_dim), dv = static_cast<int>(a.head_dim_v);
  const int pitch = static_cast<int>(decode_key_pitch(a.head_dim));
  const int tile = static_cast<int>(a.tile), heads_per_block = static_cast<int>(a.heads_per_block);
  const long long heads = static_cast<long long>(a.heads), group = heads / static_cast<long long>(a.kv_heads);
  const long long split = blockIdx.x, g = blockIdx.y, chunk = blockIdx.z;
  const int hb = static_cast<int>(min(static_cast<long long>(heads_per_block), group - chunk * heads_per_block));  // >= 1
  const long long head0 = g * group + chunk * heads_per_block;  // this block's first query head
  const long long begin = split * static_cast<long long>(a.split_length);      // < length: every split is non-empty
  const long long end = min(static_cast<long long>(a.length), begin + static_cast<long long>(a.split_length));
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = blockDim.x / 32;

  float* q_s = shared;                        // [H_b, d]
  float* o_s = q_s + heads_per_block * d;     // [H_b, d_v]
  float* p_s = o_s + heads_per_block * dv;    // [H_b, T]
  float* m_s = p_s + heads_per_block * tile;  // [H_b]
  float* l_s = m_s + heads_per_block;         // [H_b]
  float* c_s = l_s + heads_per_block;         // [H_b]
  float* k_s = c_s + heads_per_block;         // [T, pitch]
  float* v_s = a.values_in_keys ? k_s : k_s + tile * pitch;
  const int v_pitch = a.values_in_keys ? pitch : dv;

  // The block's query rows (consecutive heads are consecutive rows of q), and empty states:
  // m = -inf, l = 0, O~ = 0.
  for (int x = tid; x < hb * d; x += blockDim.x) q_s[x] = a.q[head0 * d + x];
  for (int x = tid; x < hb * dv; x += blockDim.x) o_s[x] = 0.0f;
  for (int r = tid; r < hb; r += blockDim.x) {
    m_s[r] = -INFINITY;
    l_s[r] = 0.0f;
  }
  __syncthreads();

  for (long long t0 = begin; t0 < end; t0 += tile) {
    const int n = static_cast<int>(min(static_cast<long long>(tile), end - t0));  // positions in this tile
    // Stage the tile's keys (and values), one warp per position: the row is found once (the only
    // step where the cache's layout matters), and its 32 lanes read consecutive floats of it.
    for (int t = warp; t < n; t += warps) {
      const long long row = rows(g, t0 + t);
      const float* k_row = a.k + row * static_cast<long long>(a.k_stride);
      for (int e = lane; e < d; e += 32) k_s[t * pitch + e] = k_row[e];
      if (!a.values_in_keys) {
        const float* v_row = a.v + row * static_cast<long long>(a.v_stride);
        for (int e = lane; e < dv; e += 32) v_s[t * dv + e] = v_row[e];
      }
    }
    __syncthreads();

    // s_rt = scale (q_r . k_t): one thread per (head, position) of the tile.
    for (int x = tid; x < hb * n; x += blockDim.x) {
      const int r = x / n, t = x % n;
      float dot = 0.0f;
      for (int e = 0; e < d; ++e) dot += q_s[r * d + e] * k_s[t * pitch + e];
      p_s[r * tile + t] = dot * a.scale;
    }
    __syncthreads();

    // The online softmax step, one warp per head: m' = max(m, max_t s_rt), p_rt = e^{s_rt - m'},
    // l' = e^{m - m'} l + sum_t p_rt; corr = e^{m - m'} rescales O~ below (0 on the first tile,
    // where m = -inf; m' is finite, as the scores are). The loop over r is the same for the 32
    // lanes of a warp, so the shuffles of warp_max / warp_sum see the whole warp.
    for (int r = warp; r < hb; r += warps) {
      const float m_old = m_s[r];
      float tile_max = -INFINITY;
      for (int t = lane; t < n; t += 32) tile_max = fmaxf(tile_max, p_s[r * tile + t]);
      const float m_new = fmaxf(m_old, detail::warp_max(tile_max));
      float sum = 0.0f;
      for (int t = lane; t < n; t += 32) {
        const float p = expf(p_s[r * tile + t] - m_new);
        p_s[r * tile + t] = p;
        sum += p;
      }
      sum = detail::warp_sum(sum);
      if (lane == 0) {  // every lane has read m_s[r] before the shuffles above
        const float correction = expf(m_old - m_new);
        c_s[r] = correction;
        l_s[r] = l_s[r] * correction + sum;
        m_s[r] = m_new;
      }
    }
    __syncthreads();

    // O~_r <- corr_r O~_r + sum_t p_rt v_t: each thread owns the same elements (r, e) of O~ on
    // every tile, so no two threads write one element.
    for (int x = tid; x < hb * dv; x += blockDim.x) {
      const int r = x / dv, e = x % dv;
      float acc = o_s[x] * c_s[r];
      for (int t = 0; t < n; ++t) acc += p_s[r * tile + t] * v_s[t * v_pitch + e];
      o_s[x] = acc;
    }
    __syncthreads();  // the next tile overwrites K, V, P and corr
  }

  // The split's partial state of each head: m_s, l_s at [split, head], O~_s at [split, head, :].
  const long long first = split * heads + head0;
  for (int x = tid; x < hb * dv; x += blockDim.x) a.partial_o[first * dv + x] = o_s[x];
  for (int r = tid; r < hb; r += blockDim.x) {
    a.partial_m[first + r] = m_s[r];
    a.partial_l[first + r] = l_s[r];
  }
}

// ------------------------------------------------------------------------------ merge kernel

// One thread block per query head i, threads over its d_v output elements. Chapter 04's merge of
// softmax states over the splits s: m = max_s m_s, l = sum_s e^{m_s - m} l_s,
// o = sum_s e^{m_s - m} O~_s / l, L = m + ln l. Every split saw at least one position, so
// l_s >= 1 and every m_s is finite: no split is empty, and l > 0.
__global__ void decode_merge_kernel(DecodeArgs a) {
  const long long i = blockIdx.x, heads = static_cast<long long>(a.heads), dv = static_cast<long long>(a.head_dim_v);
  const long long splits = static_cast<long long>(a.splits);
  float m = -INFINITY;
  for (long long s = 0; s < splits; ++s) m = fmaxf(m, a.partial_m[s * heads + i]);
  float l = 0.0f;
  for (long long s = 0; s < splits; ++s) l += expf(a.partial_m[s * heads + i] - m) * a.partial_l[s * heads + i];
  for (long long e = threadIdx.x; e < dv; e += blockDim.x) {
    float o = 0.0f;
    for (long long s = 0; s < splits; ++s)
      o += expf(a.partial_m[s * heads + i] - m) * a.partial_o[(s * heads + i) * dv + e];
    a.out[i * dv + e] = o / l;
  }
  if (threadIdx.x == 0) a.lse[i] = m + logf(l);
}

template <class Rows>
void launch_split(const DecodeArgs& a, Rows rows) {
  const std::size_t shared = decode_shared_bytes(a);
  // Beyond 48 KiB a kernel must opt in to the larger shared memory of sm_80 / sm_90.
  TVLAB_CUDA_CHECK(cudaFuncSetAttribute(decode_split_kernel<Rows>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(shared)));
  const std::size_t group = a.heads / a.kv_heads;
  const dim3 grid(static_cast<unsigned>(a.splits), static_cast<unsigned>(a.kv_heads),
                  static_cast<unsigned>((group + a.heads_per_block - 1) / a.heads_per_block));
  decode_split_kernel<Rows><<<grid, static_cast<unsigned>(kDecodeThreads), shared>>>(a, rows);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void decode_attention(const DecodeArgs& a) {
  if (a.block_table)
    launch_split(a, PagedRows{a.block_table, static_cast<long long>(a.kv_heads), static_cast<long long>(a.block_size)});
  else
    launch_split(a, ContiguousRows{static_cast<long long>(a.capacity)});
  decode_merge_kernel<<<static_cast<unsigned>(a.heads), 128>>>(a);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tvlab::cuda::device
