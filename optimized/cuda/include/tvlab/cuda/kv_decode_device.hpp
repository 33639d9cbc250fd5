#pragma once
/// @file
/// Device-pointer entry point of chapter 05's decode step (no xtensor here): split-K
/// flash-decoding over a KV cache, one launch for the partial results of every (kv head, split of
/// the positions, chunk of query heads) and one for their merge. One kernel serves the contiguous
/// cache of GQA / MQA / MHA, the paged cache (through a block table) and MLA's absorbed cache (one
/// kv head whose values are the first columns of its keys): they differ only in where the key and
/// value rows of a position lie. The shared-memory formula is written here once, as an inline
/// function, so the launch, the host wrapper that sizes the tiles and the build without CUDA all
/// compute the same number.

#include <cstddef>

// The key tile's pitch is computed on the host (shared-memory size) and in the kernel.
#if defined(__CUDACC__)
#define TVLAB_KV_HOST_DEVICE __host__ __device__
#else
#define TVLAB_KV_HOST_DEVICE
#endif

namespace tvlab::cuda::device {

/// Arguments of the decode kernels. All pointers are device memory, row-major.
///
/// The key row of kv head \f$ g \f$ at position \f$ t \f$ starts at `k + row(g, t) * k_stride`
/// (`head_dim` floats), its value row at `v + row(g, t) * v_stride` (`head_dim_v` floats), with
/// - a contiguous cache `[kv_heads, capacity, .]` (`block_table` null): \f$ \text{row}(g, t) = g\,\text{capacity} + t \f$;
/// - a paged pool `[num_blocks, kv_heads, block_size, .]` (vLLM's layout): position t lies in block
///   \f$ T[\lfloor t / b \rfloor] \f$, slot \f$ t \bmod b \f$, so
///   \f$ \text{row}(g, t) = (T[\lfloor t / b \rfloor]\, g_{\text{all}} + g)\, b + (t \bmod b) \f$.
struct DecodeArgs {
  const float* q = nullptr;  ///< [heads, head_dim], one query row per head
  const float* k = nullptr;  ///< key rows, `k_stride` floats apart
  const float* v = nullptr;  ///< value rows, `v_stride` floats apart (unused when `values_in_keys`)
  float* out = nullptr;      ///< [heads, head_dim_v]
  float* lse = nullptr;      ///< [heads]: \f$ L_i = m_i + \ln \ell_i \f$
  std::size_t heads = 0;     ///< h, query heads; a multiple of kv_heads
  std::size_t kv_heads = 0;  ///< g, key/value heads; query head i reads kv head \f$ \lfloor i / (h/g) \rfloor \f$
  std::size_t length = 0;    ///< positions attended, \f$ t \in [0, \text{length}) \f$, >= 1
  std::size_t head_dim = 0, head_dim_v = 0;
  std::size_t k_stride = 0, v_stride = 0;
  /// MLA's absorbed cache: the values are the first `head_dim_v` columns of the key rows, so the
  /// key tile staged in shared memory serves as the value tile too (the cache is read once).
  bool values_in_keys = false;
  float scale = 1.0f;

  std::size_t capacity = 0;                         ///< contiguous cache: positions per kv head
  const unsigned long long* block_table = nullptr;  ///< paged cache: physical block of each logical block
  std::size_t block_size = 0;                       ///< paged cache: b, positions per block

  /// The positions are cut into `splits` ranges of `split_length` (the last one shorter), each
  /// non-empty: `splits` = ceil(length / split_length).
  std::size_t splits = 1, split_length = 1;
  /// Query heads of one group per thread block (\f$ H_b \f$, each key staged once serves all of
  /// them); a group of more heads is covered by ceil((h/g) / H_b) thread blocks.
  std::size_t heads_per_block = 16;
  /// Positions staged in shared memory at a time (\f$ T \f$).
  std::size_t tile = 32;

  /// Workspace: each split's partial state per query head, \f$ m_s, \ell_s \f$ `[splits, heads]`
  /// and the unnormalised \f$ \tilde o_s \f$ `[splits, heads, head_dim_v]`.
  float* partial_m = nullptr;
  float* partial_l = nullptr;
  float* partial_o = nullptr;
};

/// Threads per thread block of the split kernel (8 warps).
inline constexpr std::size_t kDecodeThreads = 256;

/// The row pitch of the key tile in shared memory: head_dim, made odd, so that the 32 threads of a
/// warp that read column e of 32 consecutive keys hit 32 different banks.
TVLAB_KV_HOST_DEVICE inline std::size_t decode_key_pitch(std::size_t head_dim) { return head_dim % 2 == 0 ? head_dim + 1 : head_dim; }

/// The shared memory of one thread block of the split kernel, in bytes: the queries
/// \f$ [H_b, d] \f$, the accumulators \f$ \tilde o\ [H_b, d_v] \f$, the scores of a tile
/// \f$ [H_b, T] \f$, \f$ m, \ell \f$ and the rescaling factor \f$ [H_b] \f$ each, the key tile
/// \f$ [T, \text{pitch}] \f$ and, unless the values are in the keys, the value tile \f$ [T, d_v] \f$.
inline std::size_t decode_shared_bytes(const DecodeArgs& a) {
  const std::size_t hb = a.heads_per_block, t = a.tile;
  const std::size_t floats = hb * (a.head_dim + a.head_dim_v + t + 3) + t * decode_key_pitch(a.head_dim) +
                             (a.values_in_keys ? 0 : t * a.head_dim_v);
  return floats * sizeof(float);
}

/// Sizes the work of a step whose shapes (heads, kv_heads, length, head_dim, head_dim_v,
/// values_in_keys) are set, as the host-tensor wrappers do: `heads_per_block` and `tile` (16 and 32,
/// halved until a thread block's shared memory fits the device), then `splits` and `split_length`
/// (at most `requested_splits` ranges, or, for 0, enough for about four thread blocks per
/// multiprocessor of an H100 / H200 and no range shorter than a tile). The workspace it needs is
/// then `splits * heads * (head_dim_v + 2)` floats. Throws `tvlab::Error` naming `function` when a
/// limit of the device or of a CUDA grid is exceeded. (Defined in kv_decode_host.cpp.)
void plan_decode(const char* function, DecodeArgs& args, std::size_t requested_splits = 0);

/// The decode step: the split kernel, grid (splits, kv_heads, head chunks), writes every split's
/// partial state; the merge kernel, one thread block per query head, combines them into `out`
/// and `lse`. fp32 throughout.
void decode_attention(const DecodeArgs& args);

}  // namespace tvlab::cuda::device
