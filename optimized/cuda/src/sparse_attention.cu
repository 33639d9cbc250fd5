// CUDA kernels of chapter 03: attention over a block layout (block-sparse flash) and over a
// sliding window (no layout), both with chapter 04's online softmax, fp32. No xtensor here; the
// host-tensor wrappers are in sparse_attention_host.cpp.

#include "check.cuh"
#include "tvlab/cuda/sparse_attention_device.hpp"

namespace tvlab::cuda::device {
namespace {

constexpr int kMaxHeadDim = 256;  // as validate_sparse_attention: head_dim, head_dim_v <= 256

// The running state of one query row's online softmax: the largest score m seen so far, the sum
// l = sum_j e^{s_j - m} and the unnormalised output O~ = sum_j e^{s_j - m} v_j (in the caller's
// array o, head_dim_v floats).
struct RowState {
  float m = -INFINITY, l = 0.0f;
};

// Adds key j (its score s, its value row v_j) to the row: m' = max(m, s), then l and O~ rescaled
// by e^{m - m'} and e^{s - m'} v_j added. One of the two factors is e^0 = 1, so one exponential
// per key suffices. expf, not the faster __expf: its error stays within 2 ulp for every argument.
__device__ inline void add_key(RowState& row, float* o, float s, const float* v_j, int dv) {
  if (s > row.m) {
    const float correction = row.m == -INFINITY ? 0.0f : expf(row.m - s);  // e^{m - m'}; nothing to rescale yet at -inf
    row.l = row.l * correction + 1.0f;
    for (int e = 0; e < dv; ++e) o[e] = o[e] * correction + v_j[e];
    row.m = s;
  } else {
    const float p = expf(s - row.m);  // e^{s - m'}, m' = m
    row.l += p;
    for (int e = 0; e < dv; ++e) o[e] += p * v_j[e];
  }
}

// o_i = O~ / l and L_i = m + ln l; a row that saw no key (l = 0) gets 0 and -inf.
__device__ inline void write_row(const RowState& row, const float* o, int dv, float* out_row, float* lse) {
  const bool seen = row.l > 0.0f;
  for (int e = 0; e < dv; ++e) out_row[e] = seen ? o[e] / row.l : 0.0f;
  *lse = seen ? row.m + logf(row.l) : -INFINITY;
}

// s = scale (q_i . k_j), the dot product in float as every backend forms it.
__device__ inline float score(const float* q, const float* k_j, int d, float scale) {
  float dot = 0.0f;
  for (int e = 0; e < d; ++e) dot += q[e] * k_j[e];
  return dot * scale;
}

// Copies rows [0, rows) of a [., width] matrix that starts at `from` into shared memory, every
// thread of the block a strided share (consecutive threads read consecutive floats).
__device__ inline void stage_rows(float* to, const float* from, long long rows, int width) {
  const long long count = rows * width;
  for (long long t = threadIdx.x; t < count; t += blockDim.x) to[t] = from[t];
}

// ------------------------------------------------------------------------------ block-sparse

// Thread mapping. Grid: heads x blocks_per_head thread blocks (1-D); block b serves head
// h = b / blocks_per_head and, within it, t = b % blocks_per_head = (query block qb, part p),
// p < the layout's parts (p = 0 alone unless a query block has more than 1024 rows). Thread x of
// the block owns query row i = qb B_q + p rows_per_block + x when that row lies in the query block
// and in the sequence; the other threads only help to stage. Shared memory: K [stage_k, d] then
// V [stage_k, dv]. Every thread of a block runs the same loops (their bounds depend on the block
// alone), so every thread reaches every __syncthreads.
__global__ void __launch_bounds__(1024) block_sparse_kernel(BlockSparseArgs a) {
  extern __shared__ float stage[];
  const int d = static_cast<int>(a.head_dim), dv = static_cast<int>(a.head_dim_v);
  const long long seq_q = static_cast<long long>(a.seq_q), seq_k = static_cast<long long>(a.seq_k);
  const long long per_head = static_cast<long long>(a.blocks_per_head);
  const long long h = blockIdx.x / per_head, t = blockIdx.x % per_head;
  const DeviceBlockLayout layout = a.layouts[a.layout_count == 1 ? 0 : h];
  const long long bq = static_cast<long long>(layout.block_q), bk = static_cast<long long>(layout.block_k);
  const long long rows_per_block = static_cast<long long>(a.rows_per_block);
  const long long parts = static_cast<long long>(layout.parts);
  const long long qb = t / parts, part = t % parts;
  // The grid is sized for the head with the most work; the extra blocks of the others leave (the
  // whole block at once, before any barrier). So does a part that starts past the sequence's end.
  const long long first_row = qb * bq + part * rows_per_block;  // row of thread 0
  if (qb >= static_cast<long long>(layout.query_blocks) || first_row >= seq_q) return;
  const long long r = part * rows_per_block + threadIdx.x;  // this thread's row within the query block
  const long long i = qb * bq + r;                          // and within the sequence
  const bool active = r < bq && i < seq_q;

  float* k_stage = stage;
  float* v_stage = stage + static_cast<long long>(a.stage_k) * d;
  float q[kMaxHeadDim], o[kMaxHeadDim];
  if (active)
    for (int e = 0; e < d; ++e) q[e] = a.q[(h * seq_q + i) * d + e];
  for (int e = 0; e < dv; ++e) o[e] = 0.0f;
  RowState row;

  const unsigned long long first = a.block_start[layout.starts_at + qb];
  const unsigned long long last = a.block_start[layout.starts_at + qb + 1];
  unsigned long long visited = 0;  // counted as the loop runs, so the tests see the loop itself
  for (unsigned long long b = first; b < last; ++b) {
    ++visited;
    // Key block J covers keys [J B_k, J B_k + cols); the last one of the sequence may be short.
    const long long k0 = static_cast<long long>(a.key_blocks[b]) * bk;
    const long long cols = min(bk, seq_k - k0);
    // A partial block's mask row for this thread's row: byte c says whether key k0 + c is allowed.
    const int mask_index = a.partial[b];
    const std::uint8_t* mask_row =
        (mask_index < 0 || !active)
            ? nullptr
            : a.masks + layout.masks_at + (static_cast<long long>(mask_index) * bq + r) * bk;
    for (long long s0 = 0; s0 < cols; s0 += static_cast<long long>(a.stage_k)) {
      const long long staged = min(static_cast<long long>(a.stage_k), cols - s0);
      stage_rows(k_stage, a.k + (h * seq_k + k0 + s0) * d, staged, d);
      stage_rows(v_stage, a.v + (h * seq_k + k0 + s0) * dv, staged, dv);
      __syncthreads();
      if (active)
        for (int c = 0; c < static_cast<int>(staged); ++c) {
          if (mask_row && mask_row[s0 + c] == 0) continue;  // not in S_i
          add_key(row, o, score(q, k_stage + static_cast<long long>(c) * d, d, a.scale),
                  v_stage + static_cast<long long>(c) * dv, dv);
        }
      __syncthreads();  // the next part or block overwrites shared memory
    }
  }
  // The first part of each query block reports the blocks it visited (every part visits the same).
  if (threadIdx.x == 0 && part == 0 && a.tiles_computed) atomicAdd(a.tiles_computed, visited);
  if (active) write_row(row, o, dv, a.out + (h * seq_q + i) * dv, a.lse + h * seq_q + i);
}

// ------------------------------------------------------------------------------ sliding window

// Thread mapping. Grid: heads x ceil(n_q / block_q) thread blocks (1-D); block b serves head
// h = b / query_tiles and the query rows [r0, r0 + block_q), r0 = (b % query_tiles) block_q; thread
// x owns row i = r0 + x when i < n_q. Shared memory: K [block_k, d] then V [block_k, dv]. The key
// tiles the block visits depend on the block alone, so every thread reaches every __syncthreads.
__global__ void __launch_bounds__(1024) sliding_window_kernel(SlidingWindowArgs a) {
  extern __shared__ float stage[];
  const int d = static_cast<int>(a.head_dim), dv = static_cast<int>(a.head_dim_v);
  const long long seq_q = static_cast<long long>(a.seq_q), seq_k = static_cast<long long>(a.seq_k);
  const long long bq = static_cast<long long>(a.block_q), bk = static_cast<long long>(a.block_k);
  const long long query_tiles = (seq_q + bq - 1) / bq;
  const long long h = blockIdx.x / query_tiles, r0 = (blockIdx.x % query_tiles) * bq;
  const long long i = r0 + threadIdx.x;  // this thread's query row (may be past the end)
  const bool active = i < seq_q;
  // The queries are the last n_q of the n_k positions: row i sits at i' = i + n_k - n_q.
  const long long shift = seq_k - seq_q;
  // Row i's keys [begin, end) = [i' - w_l, i' + w_r + 1) within [0, n_k); the tile's rows together
  // see [tile_begin, tile_end), from its first row's begin to its last row's end.
  const long long row_begin = max(0LL, i + shift - a.left);
  const long long row_end = min(seq_k, i + shift + a.right + 1);
  const long long last_row = min(r0 + bq, seq_q) - 1;
  const long long tile_begin = max(0LL, r0 + shift - a.left);
  const long long tile_end = min(seq_k, last_row + shift + a.right + 1);

  float* k_stage = stage;
  float* v_stage = stage + bk * d;
  float q[kMaxHeadDim], o[kMaxHeadDim];
  if (active)
    for (int e = 0; e < d; ++e) q[e] = a.q[(h * seq_q + i) * d + e];
  for (int e = 0; e < dv; ++e) o[e] = 0.0f;
  RowState row;

  // Key tiles start at multiples of block_k (as chapter 04 counts them): the first that meets the
  // tile's range, up to its end.
  unsigned long long visited = 0;
  for (long long c0 = tile_begin / bk * bk; c0 < tile_end; c0 += bk) {
    ++visited;
    const long long cols = min(bk, seq_k - c0);
    stage_rows(k_stage, a.k + (h * seq_k + c0) * d, cols, d);
    stage_rows(v_stage, a.v + (h * seq_k + c0) * dv, cols, dv);
    __syncthreads();
    if (active) {
      // This row's keys within the tile: columns [max(0, begin - c0), min(cols, end - c0)).
      const int c_begin = static_cast<int>(max(0LL, row_begin - c0));
      const int c_end = static_cast<int>(min(cols, row_end - c0));
      for (int c = c_begin; c < c_end; ++c)
        add_key(row, o, score(q, k_stage + static_cast<long long>(c) * d, d, a.scale),
                v_stage + static_cast<long long>(c) * dv, dv);
    }
    __syncthreads();  // the next tile overwrites shared memory
  }
  if (threadIdx.x == 0 && a.tile_counts) {
    const unsigned long long key_tiles = static_cast<unsigned long long>((seq_k + bk - 1) / bk);
    atomicAdd(a.tile_counts, visited);
    atomicAdd(a.tile_counts + 1, key_tiles - visited);
  }
  if (active) write_row(row, o, dv, a.out + (h * seq_q + i) * dv, a.lse + h * seq_q + i);
}

}  // namespace

void block_sparse_forward(const BlockSparseArgs& a) {
  const std::size_t shared = block_sparse_shared_bytes(a);
  // Beyond 48 KiB a kernel must opt in to the larger shared memory of sm_80 / sm_90.
  TVLAB_CUDA_CHECK(cudaFuncSetAttribute(block_sparse_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(shared)));
  block_sparse_kernel<<<static_cast<unsigned>(a.heads * a.blocks_per_head), static_cast<unsigned>(a.rows_per_block),
                        shared>>>(a);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

void sliding_window_forward(const SlidingWindowArgs& a) {
  const std::size_t shared = sliding_window_shared_bytes(a);
  TVLAB_CUDA_CHECK(cudaFuncSetAttribute(sliding_window_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(shared)));
  const std::size_t query_tiles = (a.seq_q + a.block_q - 1) / a.block_q;
  sliding_window_kernel<<<static_cast<unsigned>(a.heads * query_tiles), static_cast<unsigned>(a.block_q), shared>>>(a);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tvlab::cuda::device
