#pragma once
/// @file
/// Device-pointer entry points of chapter 03's sparse attention (no xtensor here): the
/// block-sparse flash kernel over a block layout and the sliding-window kernel, with the shared
/// memory each one stages per thread block. The shared-memory formulas are written here once, as
/// inline functions, so the launch, the host wrapper that sizes the staged tiles and the build
/// without CUDA all compute the same number. Chapter 07's selected and compressed attention pass
/// their own layouts through the same `BlockSparseArgs`.

#include <cstddef>
#include <cstdint>

namespace tvlab::cuda::device {

/// One `BlockLayout` as the block-sparse kernel reads it: its tile sizes, and where its entries
/// start in the arrays of `BlockSparseArgs`, which hold every layout one after the other.
struct DeviceBlockLayout {
  unsigned long long block_q = 0, block_k = 0;  ///< \f$ B_q, B_k \ge 1 \f$
  unsigned long long query_blocks = 0;          ///< \f$ \lceil n_q / B_q \rceil \f$
  /// Thread blocks per query block: ceil(min(block_q, seq_q) / rows_per_block), 1 unless a query
  /// block holds more than 1024 rows of the sequence.
  unsigned long long parts = 1;
  unsigned long long starts_at = 0;  ///< index in `block_start` of this layout's query block 0
  unsigned long long masks_at = 0;   ///< byte offset in `masks` of this layout's mask 0
};

/// Arguments of the block-sparse kernel. All pointers are device memory, row-major.
struct BlockSparseArgs {
  const float* q = nullptr;  ///< [heads, seq_q, head_dim]
  const float* k = nullptr;  ///< [heads, seq_k, head_dim]
  const float* v = nullptr;  ///< [heads, seq_k, head_dim_v]
  float* out = nullptr;      ///< [heads, seq_q, head_dim_v]
  float* lse = nullptr;      ///< [heads, seq_q]
  std::size_t heads = 0, seq_q = 0, seq_k = 0, head_dim = 0, head_dim_v = 0;
  float scale = 1.0f;

  /// `layout_count` layouts: 1 (every head uses it) or `heads` (head h uses layout h).
  const DeviceBlockLayout* layouts = nullptr;
  std::size_t layout_count = 1;
  /// Per layout, `query_blocks + 1` offsets into `key_blocks`, already shifted by the entries of
  /// the layouts before it: query block qb of layout L lists
  /// `key_blocks[block_start[L.starts_at + qb] .. block_start[L.starts_at + qb + 1])`.
  const unsigned long long* block_start = nullptr;
  const std::uint32_t* key_blocks = nullptr;  ///< the non-empty key blocks, sorted within each query block
  const std::int32_t* partial = nullptr;      ///< per entry of key_blocks: -1 (full) or its mask's index in its layout
  const std::uint8_t* masks = nullptr;        ///< every layout's partial-block masks, block_q x block_k bytes each

  /// Threads per thread block, one per query row (<= 1024). A query block of more rows is
  /// covered by its layout's `parts` thread blocks, each with its share of the rows.
  std::size_t rows_per_block = 64;
  /// Thread blocks per head: the most, over the layouts, of query_blocks x parts.
  std::size_t blocks_per_head = 1;
  /// Keys staged in shared memory at a time: a key block wider than this is staged in parts.
  std::size_t stage_k = 64;
  /// Optional [1]: the (query block, key block) pairs visited, summed over heads.
  unsigned long long* tiles_computed = nullptr;
};

/// The block-sparse flash kernel: one thread block per (head, query block), one thread per query
/// row. The block walks the key blocks its query block lists in the layout, stages each one's
/// keys and values in shared memory (`stage_k` rows at a time), and every thread runs the online
/// softmax of chapter 04 over the keys of its row that the block allows (all of a full block; the
/// mask's 1 entries of a partial block). A row that sees no key gets output 0 and log-sum-exp
/// \f$ -\infty \f$. fp32 throughout.
void block_sparse_forward(const BlockSparseArgs& args);

/// The shared memory the block-sparse kernel stages per thread block: `stage_k` rows of keys and
/// of values, stage_k (head_dim + head_dim_v) floats.
inline std::size_t block_sparse_shared_bytes(const BlockSparseArgs& a) {
  return a.stage_k * (a.head_dim + a.head_dim_v) * sizeof(float);
}

/// Arguments of the sliding-window kernel. All pointers are device memory, row-major.
struct SlidingWindowArgs {
  const float* q = nullptr;  ///< [heads, seq_q, head_dim]
  const float* k = nullptr;  ///< [heads, seq_k, head_dim]
  const float* v = nullptr;  ///< [heads, seq_k, head_dim_v]
  float* out = nullptr;      ///< [heads, seq_q, head_dim_v]
  float* lse = nullptr;      ///< [heads, seq_q]
  std::size_t heads = 0, seq_q = 0, seq_k = 0, head_dim = 0, head_dim_v = 0;  ///< seq_q <= seq_k
  float scale = 1.0f;
  /// \f$ w_l, w_r \f$, each at most seq_k (a wider window sees the same keys): query i sees keys
  /// \f$ i' - w_l \le j \le i' + w_r \f$ with \f$ i' = i + n_k - n_q \f$.
  long long left = 0, right = 0;
  std::size_t block_q = 64;  ///< query rows per thread block, one thread each (<= 1024)
  std::size_t block_k = 64;  ///< keys per staged tile; tiles start at multiples of block_k
  /// Optional [2]: (query tile, key tile) pairs visited and skipped, summed over heads.
  unsigned long long* tile_counts = nullptr;
};

/// The sliding-window kernel: one thread block per (head, query tile of `block_q` rows), one
/// thread per query row. The tile's rows see, together, the keys
/// \f$ [\max(0, i'_{first} - w_l), \min(n_k, i'_{last} + w_r + 1)) \f$; the block stages only the
/// key tiles that meet that range, and every thread runs the online softmax over its own row's
/// range within each tile. No layout: the range comes from the row index. fp32 throughout.
void sliding_window_forward(const SlidingWindowArgs& args);

/// The shared memory the sliding-window kernel stages per thread block: a key tile and a value
/// tile, block_k (head_dim + head_dim_v) floats.
inline std::size_t sliding_window_shared_bytes(const SlidingWindowArgs& a) {
  return a.block_k * (a.head_dim + a.head_dim_v) * sizeof(float);
}

}  // namespace tvlab::cuda::device
