// CUDA kernel of chapter 04 on tensor cores: flash attention's forward pass with fp16 or bf16
// inputs and fp32 accumulation, written with the WMMA API (one 16 x 16 x 16 matrix product per
// warp instruction sequence). No xtensor here; the host-tensor wrapper is in
// flash_attention_host.cpp.
//
// One thread block per (head, query tile of bq rows); warp w owns query rows 16w .. 16w + 15 of
// the tile. Shared memory of one block (16-bit elements for Q, K, V, P~; fp32 for S, O~):
//
//   Q_i  [bq][dp + 8]    staged once           S_w  [16][bk + 4] per warp   scores, then weights
//   K_j  [bk][dp + 8]    staged per key tile   P~_w [16][bk + 8] per warp   weights in 16 bits
//   V_j  [bk][dvp + 8]   staged per key tile   O~_w [16][dvp + 4] per warp  the output accumulator
//
// dp, dvp: head_dim and head_dim_v rounded up to 16 (the padding is zeros, which add nothing to
// the products). Without padding, rows of 128 bytes or a multiple of it would all start in the
// same shared-memory bank, and a load that reads the same columns of several rows would queue on
// it. The extra 8 (or 4) elements shift each row by 16 bytes (4 of the 32 four-byte banks), so 8
// successive rows start in different banks. The layout (offsets, row lengths, total bytes) is
// `flash_tensor_core_layout` in flash_attention_device.hpp, which the host also uses to size the tiles.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include "check.cuh"
#include "tvlab/cuda/flash_attention_device.hpp"

namespace tvlab::cuda::device {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kMma = 16;        // the WMMA shape: 16 x 16 x 16
constexpr int kWarp = 32;       // threads per warp

using Layout = FlashTensorCoreLayout;

template <class T>
__device__ T from_float(float x);
template <>
__device__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Copies rows [first, first + rows_present) of a [*, width] 16-bit matrix into a shared tile of
// `rows` x `padded` (row length `ld`), zero-filling the rows past the end and the padding columns.
// Every thread of the block takes a strided share.
__device__ void stage_tile(unsigned short* tile, int ld, int rows, int padded, const std::uint16_t* src,
                           long long first, int rows_present, int width) {
  for (int t = threadIdx.x; t < rows * padded; t += blockDim.x) {
    const int r = t / padded, c = t % padded;
    tile[r * ld + c] = (r < rows_present && c < width) ? src[(first + r) * width + c] : 0;
  }
}

template <class T>
__global__ void __launch_bounds__(256) flash_tensor_core_kernel(FlashTensorCoreArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // bf16 WMMA needs sm_80; the host refuses older devices before launching
#else
  extern __shared__ __align__(128) unsigned char smem[];
  const int d = static_cast<int>(a.head_dim), dv = static_cast<int>(a.head_dim_v);
  const Layout t = flash_tensor_core_layout(static_cast<int>(a.block_q), static_cast<int>(a.block_k), d, dv);
  T* q_tile = reinterpret_cast<T*>(smem + t.q_at);
  T* k_tile = reinterpret_cast<T*>(smem + t.k_at);
  T* v_tile = reinterpret_cast<T*>(smem + t.v_at);
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  float* s_w = reinterpret_cast<float*>(smem + t.s_at) + warp * kMma * t.ld_s;
  T* p_w = reinterpret_cast<T*>(smem + t.p_at) + warp * kMma * t.ld_p;
  float* o_w = reinterpret_cast<float*>(smem + t.o_at) + warp * kMma * t.ld_o;

  const long long seq_q = static_cast<long long>(a.seq_q), seq_k = static_cast<long long>(a.seq_k);
  const long long q_tiles = (seq_q + t.bq - 1) / t.bq;
  const long long h = blockIdx.x / q_tiles, r0 = (blockIdx.x % q_tiles) * t.bq;
  const long long shift = seq_k - seq_q;  // causal: query i sees keys j <= i + shift

  // Q_i once for the whole block; O~ = 0 for this warp's rows.
  stage_tile(reinterpret_cast<unsigned short*>(q_tile), t.ld_qk, t.bq, t.dp, a.q + h * seq_q * d, r0,
             static_cast<int>(min(static_cast<long long>(t.bq), seq_q - r0)), d);
  for (int e = lane; e < kMma * t.dvp; e += kWarp) o_w[(e / t.dvp) * t.ld_o + e % t.dvp] = 0.0f;
  __syncthreads();

  // The online softmax runs with two lanes per query row: lane 2r and 2r + 1 own row r of the
  // warp's 16 and take the even and odd columns. Both keep the row's m and l.
  const int row = lane / 2, half = lane % 2;
  const long long i = r0 + warp * kMma + row;
  float m = -INFINITY, l = 0.0f;
  const long long warp_first = r0 + warp * kMma;
  const long long warp_last = min(warp_first + kMma, seq_q) - 1;  // < warp_first: no rows left
  // The tile's last query sees keys up to last_row + shift: later key tiles are skipped whole.
  const long long last_row = min(r0 + t.bq, seq_q) - 1;
  const long long key_end = a.causal ? min(seq_k, last_row + shift + 1) : seq_k;

  unsigned long long tiles_visited = 0;  // counted as the loop runs, so the tests see the loop itself
  for (long long c0 = 0; c0 < key_end; c0 += t.bk) {
    ++tiles_visited;
    const int cols = static_cast<int>(min(static_cast<long long>(t.bk), seq_k - c0));
    stage_tile(reinterpret_cast<unsigned short*>(k_tile), t.ld_qk, t.bk, t.dp, a.k + h * seq_k * d, c0, cols, d);
    stage_tile(reinterpret_cast<unsigned short*>(v_tile), t.ld_v, t.bk, t.dvp, a.v + h * seq_k * dv, c0, cols, dv);
    __syncthreads();
    // A warp whose rows are past the end, or all hidden from this tile by the causal mask, has
    // nothing to add (warp-uniform, so no lane diverges from its warp's WMMA calls).
    const bool warp_sees_tile = warp_first < seq_q && (!a.causal || c0 <= warp_last + shift);
    if (warp_sees_tile) {
      // S_w = Q_w K_j^T: block n of 16 columns sums dp / 16 products. K_j is stored [key][dim], which
      // read column-major is K_j^T [dim][key], the right-hand operand.
      for (int n = 0; n < t.bk / kMma; ++n) {
        wmma::fragment<wmma::accumulator, kMma, kMma, kMma, float> acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int kk = 0; kk < t.dp / kMma; ++kk) {
          wmma::fragment<wmma::matrix_a, kMma, kMma, kMma, T, wmma::row_major> qa;
          wmma::fragment<wmma::matrix_b, kMma, kMma, kMma, T, wmma::col_major> kb;
          wmma::load_matrix_sync(qa, q_tile + warp * kMma * t.ld_qk + kk * kMma, t.ld_qk);
          wmma::load_matrix_sync(kb, k_tile + n * kMma * t.ld_qk + kk * kMma, t.ld_qk);
          wmma::mma_sync(acc, qa, kb, acc);
        }
        wmma::store_matrix_sync(s_w + n * kMma, acc, t.ld_s, wmma::mem_row_major);
      }
      __syncwarp();

      // S = scale * S, -inf where the key is past the end or hidden by the causal mask;
      // m' = max(m, rowmax(S)) over both lanes of the row.
      float* s_row = s_w + row * t.ld_s;
      float tile_max = -INFINITY;
      for (int c = half; c < t.bk; c += 2) {
        const bool visible = i < seq_q && c < cols && (!a.causal || c0 + c <= i + shift);
        s_row[c] = visible ? s_row[c] * a.scale : -INFINITY;
        tile_max = fmaxf(tile_max, s_row[c]);
      }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffU, tile_max, 1));
      const float m_new = fmaxf(m, tile_max);
      // e^{m - m'}: 0 when these are the first keys the row sees, 1 while it has seen none.
      const float correction = m_new == -INFINITY ? 1.0f : (m == -INFINITY ? 0.0f : __expf(m - m_new));
      // P~ = e^{S - m'}, rounded to the input format for the tensor cores; l from the unrounded
      // weights (as FlashAttention-3, and as the reference's emulation).
      T* p_row = p_w + row * t.ld_p;
      float row_sum = 0.0f;
      for (int c = half; c < t.bk; c += 2) {
        const float p = s_row[c] == -INFINITY ? 0.0f : __expf(s_row[c] - m_new);
        row_sum += p;
        p_row[c] = from_float<T>(p);
      }
      row_sum += __shfl_xor_sync(0xffffffffU, row_sum, 1);
      l = l * correction + row_sum;
      m = m_new;
      // O~ = e^{m - m'} O~, before the tensor cores add P~ V_j to it.
      for (int e = half; e < t.dvp; e += 2) o_w[row * t.ld_o + e] *= correction;
      __syncwarp();

      // O~_w += P~_w V_j: block n of 16 output columns, bk / 16 products, fp32 accumulation.
      for (int n = 0; n < t.dvp / kMma; ++n) {
        wmma::fragment<wmma::accumulator, kMma, kMma, kMma, float> acc;
        wmma::load_matrix_sync(acc, o_w + n * kMma, t.ld_o, wmma::mem_row_major);
        for (int kk = 0; kk < t.bk / kMma; ++kk) {
          wmma::fragment<wmma::matrix_a, kMma, kMma, kMma, T, wmma::row_major> pa;
          wmma::fragment<wmma::matrix_b, kMma, kMma, kMma, T, wmma::row_major> vb;
          wmma::load_matrix_sync(pa, p_w + kk * kMma, t.ld_p);
          wmma::load_matrix_sync(vb, v_tile + kk * kMma * t.ld_v + n * kMma, t.ld_v);
          wmma::mma_sync(acc, pa, vb, acc);
        }
        wmma::store_matrix_sync(o_w + n * kMma, acc, t.ld_o, wmma::mem_row_major);
      }
      __syncwarp();
    }
    __syncthreads();  // the next key tile overwrites K_j and V_j
  }

  // One thread per block reports the block's tiles: those it visited, and the rest as skipped.
  if (threadIdx.x == 0 && a.tile_counts) {
    const auto all = static_cast<unsigned long long>((seq_k + t.bk - 1) / t.bk);
    atomicAdd(a.tile_counts, tiles_visited);
    atomicAdd(a.tile_counts + 1, all - tiles_visited);
  }
  // O_i = O~ / l, L_i = m + ln l (a row that saw no key: O = 0, L = -inf).
  if (i < seq_q) {
    const long long out_row = h * seq_q + i;
    const bool seen = l > 0.0f;
    for (int e = half; e < dv; e += 2) a.out[out_row * dv + e] = seen ? o_w[row * t.ld_o + e] / l : 0.0f;
    if (half == 0) a.lse[out_row] = seen ? m + __logf(l) : -INFINITY;
  }
#endif
}

template <class T>
void launch(const FlashTensorCoreArgs& a) {
  const std::size_t shared = flash_tensor_core_shared_bytes(a);
  // Beyond 48 KiB a kernel must opt in to the larger shared memory of sm_80 / sm_90.
  TVLAB_CUDA_CHECK(cudaFuncSetAttribute(flash_tensor_core_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(shared)));
  const std::size_t q_tiles = (a.seq_q + a.block_q - 1) / a.block_q;
  const unsigned threads = static_cast<unsigned>(a.block_q / kMma * kWarp);
  flash_tensor_core_kernel<T><<<static_cast<unsigned>(a.heads * q_tiles), threads, shared>>>(a);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void flash_forward_tensor_core(const FlashTensorCoreArgs& a) {
  if (a.bf16) {
    launch<__nv_bfloat16>(a);
  } else {
    launch<__half>(a);
  }
}

}  // namespace tvlab::cuda::device
