#pragma once
/// @file
/// Sparse attention patterns as data (chapter 03): for every query row \f$ i \f$ the set
/// \f$ S_i \f$ of keys it may attend to, in the two forms every kernel shares.
/// - `SparsePattern`: per-row sorted key lists (compressed sparse rows). The reference and
///   the cost and receptive-field calculators read it.
/// - `BlockLayout`: the same set cut into tiles of `block_q` query rows by `block_k` keys: which
///   (query block, key block) pairs are non-empty, and for a partial block which of its
///   entries are allowed. The block-sparse kernels (CPU and CUDA) loop over it.
///
/// One pattern serves every head, or there is one per head (Longformer's per-head dilation,
/// the Sparse Transformer's two heads): `HeadPatterns` holds 1 or `heads` entries. Chapter 07
/// builds DeepSeek's selected blocks and compressed attention on the same two types.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tvlab/core/attention_mask.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab {

/// \f$ S_i \f$ for each query row \f$ i < n_q \f$, keys \f$ j < n_k \f$, as compressed sparse rows:
/// the keys of row \f$ i \f$ are `keys[row_start[i] .. row_start[i + 1])`, sorted, distinct.
struct SparsePattern {
  std::size_t seq_q = 0;                  ///< \f$ n_q \f$: query rows
  std::size_t seq_k = 0;                  ///< \f$ n_k \f$: key positions
  std::vector<std::size_t> row_start;     ///< `seq_q + 1` offsets into `keys`, `row_start[0] = 0`
  std::vector<std::uint32_t> keys;        ///< the allowed key indices, row after row

  /// \f$ |S_i| \f$.
  std::size_t row_size(std::size_t i) const { return row_start[i + 1] - row_start[i]; }
  /// The total number of attended (query, key) pairs, \f$ \sum_i |S_i| \f$.
  std::size_t pairs() const { return keys.size(); }
  /// Whether \f$ j \in S_i \f$ (binary search in row i).
  bool allows(std::size_t i, std::size_t j) const;
  /// The dense boolean mask `[seq_q, seq_k]` (true = may attend): what chapter 00's attention
  /// takes as `AttentionMask::allowed`.
  Mask2 to_mask() const;
};

/// The pattern of a dense boolean mask `[seq_q, seq_k]` (true = may attend).
SparsePattern pattern_from_mask(const Mask2& allowed);

/// One pattern for every head (size 1) or one per head (size `heads`).
using HeadPatterns = std::vector<SparsePattern>;

/// \f$ S_i = \bigcup_m A^{(m)}_i \f$: the pairs any of `patterns` allows (at least one, all of
/// the same shape; `tvlab::Error` naming `patterns` otherwise). What a layer whose heads use
/// different patterns lets flow from input to output, and the Sparse Transformer's single-head
/// "merged" form of its two heads.
SparsePattern pattern_union(const std::vector<SparsePattern>& patterns);

/// The pattern that head `h` uses: `patterns[0]` when there is one, else `patterns[h]`.
const SparsePattern& pattern_of_head(const HeadPatterns& patterns, std::size_t h);

/// Checks `pattern` for `function` against sizes seq_q and seq_k: `row_start` of seq_q + 1
/// non-decreasing offsets from 0 to `keys.size()`, each row's keys strictly increasing and
/// below seq_k. Throws `tvlab::Error` naming `parameter` and what is wrong.
void validate_pattern(const char* function, const char* parameter, const SparsePattern& pattern, std::size_t seq_q,
                      std::size_t seq_k);

/// Checks `patterns` (1 or `heads` entries, each as `validate_pattern`), naming `parameter`.
void validate_head_patterns(const char* function, const char* parameter, const HeadPatterns& patterns,
                            std::size_t heads, std::size_t seq_q, std::size_t seq_k);

/// The pattern cut into tiles: query block \f$ I \f$ holds rows \f$ [I B_q, \min((I+1) B_q, n_q)) \f$,
/// key block \f$ J \f$ keys \f$ [J B_k, \min((J+1) B_k, n_k)) \f$. For each query block, the key blocks
/// that hold at least one allowed pair, in increasing order; a block whose every (row, key)
/// inside the matrix is allowed is *full* (`partial[b] = -1`), otherwise its entries are the
/// `block_q * block_k` bytes at `masks[partial[b] * block_q * block_k]` (row-major, 1 = allowed,
/// 0 also for rows or keys past the matrix's edge).
struct BlockLayout {
  std::size_t seq_q = 0, seq_k = 0;
  std::size_t block_q = 0, block_k = 0;  ///< \f$ B_q, B_k \ge 1 \f$
  std::vector<std::size_t> block_start;  ///< `query_blocks() + 1` offsets into `key_blocks`
  std::vector<std::uint32_t> key_blocks; ///< the non-empty key blocks of each query block, sorted
  std::vector<std::int32_t> partial;     ///< per entry of `key_blocks`: -1 (full) or its mask's index
  std::vector<std::uint8_t> masks;       ///< the partial blocks' masks, `block_q * block_k` bytes each

  std::size_t query_blocks() const { return (seq_q + block_q - 1) / block_q; }
  std::size_t key_block_count() const { return (seq_k + block_k - 1) / block_k; }
  /// Non-empty (query block, key block) pairs: the tiles a block-sparse kernel computes.
  std::size_t blocks() const { return key_blocks.size(); }
  /// Of those, the partial ones (the kernel applies their mask).
  std::size_t partial_blocks() const { return masks.size() / (block_q * block_k); }
};

/// The block layout of `pattern` with tiles of block_q x block_k (both >= 1, at most 2^24 entries
/// per tile; `tvlab::Error` naming them otherwise). The pattern is checked first
/// (`validate_pattern`, naming `pattern`).
BlockLayout to_block_layout(const SparsePattern& pattern, std::size_t block_q, std::size_t block_k);

/// The pattern a layout describes: every pair of its full blocks, and the allowed entries of its
/// partial ones. `to_pattern(to_block_layout(p, bq, bk)) == p` for every pattern.
SparsePattern to_pattern(const BlockLayout& layout);

/// A layout of whole tiles, written block by block (a user-supplied layout, or the blocks a
/// selection such as chapter 07's picks): `blocks` is `[query blocks, key blocks]`
/// (\f$ \lceil n_q/B_q \rceil \times \lceil n_k/B_k \rceil \f$), true where query block \f$ I \f$ attends to
/// every key of key block \f$ J \f$. Every listed block is full. `tvlab::Error` naming `blocks` or
/// the block size when the shapes do not agree.
BlockLayout block_layout_from_blocks(std::size_t seq_q, std::size_t seq_k, std::size_t block_q, std::size_t block_k,
                                     const Mask2& blocks);

/// Checks a layout (for example one a user wrote) for `function`: block sizes >= 1 (and a tile of
/// at most 2^24 entries, the size of a partial block's mask), offsets consistent, key blocks sorted
/// and below `key_block_count()`, mask indices in range, and the sizes seq_q, seq_k. Throws
/// `tvlab::Error` naming `parameter`.
void validate_block_layout(const char* function, const char* parameter, const BlockLayout& layout,
                           std::size_t seq_q, std::size_t seq_k);

/// One layout per head, or one for every head, as `HeadPatterns`.
using HeadLayouts = std::vector<BlockLayout>;

/// The layout of each pattern, with the same tiles.
HeadLayouts to_block_layouts(const HeadPatterns& patterns, std::size_t block_q, std::size_t block_k);

/// The layout that head `h` uses.
const BlockLayout& layout_of_head(const HeadLayouts& layouts, std::size_t h);

/// Checks `layouts` (1 or `heads` entries, each as `validate_block_layout`), naming `parameter`.
void validate_head_layouts(const char* function, const char* parameter, const HeadLayouts& layouts,
                           std::size_t heads, std::size_t seq_q, std::size_t seq_k);

/// Checks a sliding window for `function`: widths \f$ w_l, w_r \ge 0 \f$, and seq_q <= seq_k (the
/// queries are the last seq_q of the seq_k positions). Throws `tvlab::Error` naming `window.left`,
/// `window.right` or the sizes.
void validate_sliding_window(const char* function, SlidingWindow window, std::size_t seq_q, std::size_t seq_k);

/// The checks every sparse attention function (ref, opt, CUDA) runs on q `[heads, seq_q, d]`, k
/// `[heads, seq_k, d]`, v `[heads, seq_k, d_v]` and the scale: chapter 00's (`validate_attention`
/// without a mask), and head_dim, head_dim_v <= 256 (`kFlashMaxHeadDim`). Returns the scale.
/// The pattern, layouts or window are checked by the caller (`validate_head_patterns`, ...).
double validate_sparse_attention(const char* function, const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                 const std::optional<double>& scale);

/// A small character grid of the pattern for `--step`: one line per query row, '#' where the
/// row attends, '.' elsewhere (only when seq_q and seq_k are at most 64; otherwise a summary).
std::string pattern_grid(const SparsePattern& pattern);

}  // namespace tvlab
