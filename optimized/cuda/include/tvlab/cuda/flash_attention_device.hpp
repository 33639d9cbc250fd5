#pragma once
/// @file
/// Device-pointer entry points of chapter 04's flash attention (no xtensor here): the fp32
/// kernels of flash_attention.cu and the tensor-core kernel of flash_attention_tensor_core.cu,
/// with the shared memory each one stages per block. The shared-memory formulas are written
/// here once, as inline functions, so the launch, the host wrapper that sizes the tiles and the
/// build without CUDA all compute the same number.

#include <cstddef>
#include <cstdint>

// The tensor-core layout is computed on the host (tile sizing) and in the kernel.
#if defined(__CUDACC__)
#define TVLAB_HOST_DEVICE __host__ __device__
#else
#define TVLAB_HOST_DEVICE
#endif

namespace tvlab::cuda::device {

/// Arguments of the flash forward kernels. All pointers are device memory, row-major.
struct FlashArgs {
  const float* q = nullptr;  ///< [heads, seq_q, head_dim]
  const float* k = nullptr;  ///< [heads, seq_k, head_dim]
  const float* v = nullptr;  ///< [heads, seq_k, head_dim_v]
  float* out = nullptr;      ///< [heads, seq_q, head_dim_v]
  float* lse = nullptr;      ///< [heads, seq_q]
  std::size_t heads = 0, seq_q = 0, seq_k = 0, head_dim = 0, head_dim_v = 0;
  std::size_t block_q = 64, block_k = 64;  ///< tile sizes (tiled kernel)
  float scale = 1.0f;
  bool causal = false;
  unsigned long long* tile_counts = nullptr;  ///< optional [2]: tiles computed, tiles skipped (tiled kernel)
};

/// Version 1: one thread per query row, walking every key with the online softmax; q and the
/// output accumulator in per-thread arrays (local memory). The simplest correct kernel.
void flash_forward_rowwise(const FlashArgs& args);

/// Version 2: one thread block per (head, query tile of `block_q` rows), one thread per query
/// row; the block stages each key/value tile of `block_k` rows in shared memory once for all its
/// rows (block_k (head_dim + head_dim_v) floats), skips tiles the causal mask hides, keeps m and l
/// in registers and q and the output accumulator in per-thread arrays (local memory), and adds
/// its tile counts to `tile_counts`. fp32 throughout. block_q <= 1024.
void flash_forward_tiled(const FlashArgs& args);

/// The shared memory the tiled kernel stages per block: a key tile and a value tile,
/// block_k (head_dim + head_dim_v) floats.
inline std::size_t flash_tiled_shared_bytes(const FlashArgs& a) {
  return a.block_k * (a.head_dim + a.head_dim_v) * sizeof(float);
}

/// Arguments of the backward kernels (fp32). All pointers are device memory, row-major.
struct FlashBackwardArgs {
  const float* q = nullptr;     ///< [heads, seq_q, head_dim]
  const float* k = nullptr;     ///< [heads, seq_k, head_dim]
  const float* v = nullptr;     ///< [heads, seq_k, head_dim_v]
  const float* out = nullptr;   ///< [heads, seq_q, head_dim_v], from the forward pass
  const float* lse = nullptr;   ///< [heads, seq_q], from the forward pass
  const float* dout = nullptr;  ///< [heads, seq_q, head_dim_v]
  float* delta = nullptr;       ///< [heads, seq_q] workspace: D_i = rowsum(dO_i o O_i)
  float* dq = nullptr;          ///< [heads, seq_q, head_dim]
  float* dk = nullptr;          ///< [heads, seq_k, head_dim]
  float* dv = nullptr;          ///< [heads, seq_k, head_dim_v]
  std::size_t heads = 0, seq_q = 0, seq_k = 0, head_dim = 0, head_dim_v = 0;
  std::size_t block_q = 64, block_k = 64;  ///< <= 1024 each: one thread per row
  float scale = 1.0f;
  bool causal = false;
};

/// The backward pass in three launches, no atomics: D_i (one thread per query row); dK and dV
/// (one block per (head, key tile of `block_k` rows), one thread per key row, query tiles of
/// `block_q` rows with their dO, L and D staged in shared memory); dQ (one block per (head, query
/// tile), one thread per query row, key/value tiles staged as in the forward kernel). P and dS are
/// recomputed from the saved log-sum-exp in both passes. Tiles the causal mask hides are skipped.
void flash_backward(const FlashBackwardArgs& args);

/// The shared memory each backward pass stages per block. dK/dV pass: a query tile of q, dO, L, D.
inline std::size_t flash_backward_dkdv_shared_bytes(const FlashBackwardArgs& a) {
  return a.block_q * (a.head_dim + a.head_dim_v + 2) * sizeof(float);
}
/// dQ pass: a key tile of k and v.
inline std::size_t flash_backward_dq_shared_bytes(const FlashBackwardArgs& a) {
  return a.block_k * (a.head_dim + a.head_dim_v) * sizeof(float);
}

/// Arguments of the tensor-core kernel. q, k, v hold the bits of fp16 or bf16 values (rounded on
/// the host, to nearest even); the output and the log-sum-exp are fp32.
struct FlashTensorCoreArgs {
  const std::uint16_t* q = nullptr;  ///< [heads, seq_q, head_dim], fp16 or bf16 bits
  const std::uint16_t* k = nullptr;  ///< [heads, seq_k, head_dim]
  const std::uint16_t* v = nullptr;  ///< [heads, seq_k, head_dim_v]
  bool bf16 = false;                 ///< the format of q, k, v and of the weights P~: bf16, else fp16
  float* out = nullptr;              ///< [heads, seq_q, head_dim_v]
  float* lse = nullptr;              ///< [heads, seq_q]
  std::size_t heads = 0, seq_q = 0, seq_k = 0, head_dim = 0, head_dim_v = 0;
  std::size_t block_q = 64, block_k = 64;  ///< multiples of 16; block_q <= 128 (one warp per 16 rows)
  float scale = 1.0f;
  bool causal = false;
  unsigned long long* tile_counts = nullptr;  ///< optional [2]: tiles computed, tiles skipped
};

/// Version 3, on tensor cores: one thread block per (head, query tile of `block_q` rows), one warp
/// per 16 query rows. The block stages Q_i once and each K_j, V_j tile in shared memory; each warp
/// forms its 16 x block_k scores with WMMA 16 x 16 x 16 products (16-bit inputs, fp32
/// accumulation), runs the online softmax on them with two lanes per row, rounds P~ to the input
/// format and adds P~ V_j to its fp32 accumulator (kept in shared memory: a WMMA fragment's layout
/// is opaque, so the per-row rescaling happens there). Whole tiles the causal mask hides are
/// skipped per block, and per warp. Needs sm_80 or later.
void flash_forward_tensor_core(const FlashTensorCoreArgs& args);

/// Where the tensor-core kernel keeps its tiles in one block's shared memory (the picture and the
/// reasons are in flash_attention_tensor_core.cu). dp, dvp: head_dim and head_dim_v rounded up to
/// 16; every row padded by 16 bytes (8 16-bit or 4 float elements) against bank conflicts. The
/// `*_at` fields are byte offsets, `ld_*` row lengths (leading dimensions) in elements, `bytes`
/// the total. Every region and every 16-row block inside it starts on a 32-byte boundary, as
/// WMMA's loads and stores require: the row counts are multiples of 16 and every row is a whole
/// number of 2-byte or 4-byte elements.
struct FlashTensorCoreLayout {
  int bq, bk, dp, dvp;
  int ld_qk, ld_v, ld_s, ld_p, ld_o;
  unsigned long long q_at, k_at, v_at, s_at, p_at, o_at, bytes;
};

/// The layout for query tiles of bq rows, key tiles of bk rows and head dimensions d, dv:
/// Q_i [bq][dp + 8], K_j [bk][dp + 8], V_j [bk][dvp + 8] (16-bit); S [bq][bk + 4] (fp32),
/// P~ [bq][bk + 8] (16-bit), O~ [bq][dvp + 4] (fp32), 16 rows of S, P~ and O~ per warp.
TVLAB_HOST_DEVICE constexpr FlashTensorCoreLayout flash_tensor_core_layout(int bq, int bk, int d, int dv) {
  constexpr int kSkew16 = 8, kSkewFloat = 4;  // 16 bytes of padding per row
  FlashTensorCoreLayout t{};
  t.bq = bq;
  t.bk = bk;
  t.dp = (d + 15) / 16 * 16;
  t.dvp = (dv + 15) / 16 * 16;
  t.ld_qk = t.dp + kSkew16;
  t.ld_v = t.dvp + kSkew16;
  t.ld_s = bk + kSkewFloat;
  t.ld_p = bk + kSkew16;
  t.ld_o = t.dvp + kSkewFloat;
  t.q_at = 0;
  t.k_at = t.q_at + 2ULL * bq * t.ld_qk;
  t.v_at = t.k_at + 2ULL * bk * t.ld_qk;
  t.s_at = t.v_at + 2ULL * bk * t.ld_v;  // bq rows: 16 per warp
  t.p_at = t.s_at + 4ULL * bq * t.ld_s;
  t.o_at = t.p_at + 2ULL * bq * t.ld_p;
  t.bytes = t.o_at + 4ULL * bq * t.ld_o;
  return t;
}

/// The shared memory the tensor-core kernel needs for these arguments.
inline std::size_t flash_tensor_core_shared_bytes(const FlashTensorCoreArgs& a) {
  return static_cast<std::size_t>(flash_tensor_core_layout(static_cast<int>(a.block_q), static_cast<int>(a.block_k),
                                                           static_cast<int>(a.head_dim),
                                                           static_cast<int>(a.head_dim_v))
                                      .bytes);
}

}  // namespace tvlab::cuda::device
