#pragma once
/// @file
/// Chapter 03, optimized CPU: the block-sparse flash kernel (chapter 04's online softmax over
/// only the non-empty blocks of a layout; no n x n buffer; threads over (head, query block)) and
/// the sliding-window kernel that needs no layout (each query tile's key range computed from its
/// rows). Same names and signatures as `tvlab/ref/sparse_attention.hpp`.
/// @ingroup ch03

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "tvlab/core/attention_mask.hpp"
#include "tvlab/core/flash_config.hpp"
#include "tvlab/core/sparse_pattern.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// @ingroup ch03
/// Version 1: the reference's loops in float, one query row at a time, over the blocks of its
/// query block only. Threads over (head, query block), dynamically scheduled (BigBird's global
/// rows see every key block, the others a few). For each listed key block a row forms its scores
/// with contiguous `omp simd` dot products (skipping the entries a partial block's mask hides),
/// then folds the block into its running maximum, sum and output accumulator as chapter 04's
/// online softmax does. Extra memory: one accumulator row per thread.
FlashOutput block_sparse_attention_v1(const Tensor3& q, const Tensor3& k, const Tensor3& v, const HeadLayouts& layouts,
                                      std::optional<double> scale = {});

/// @ingroup ch03
/// Version 2: v1's blocks, with the tile products on chapter 04's register-blocked micro-kernels
/// (`S = scale Q K^T` and `O += P V` for up to 64 query rows at once). K is packed once per head,
/// transposed to `[d, ldk]` (every key contiguous along a row, so a block may start at any key),
/// and V padded to a multiple of the micro-kernel width when it is not one already. A block is
/// processed in chunks of 64 keys; a partial block's mask and the chunk's padding become
/// \f$ -\infty \f$ scores, so the softmax runs on whole vectors. Extra memory: the packed K (and
/// V), and per thread one 64 x 64 score tile and one output tile; no `[seq_q, seq_k]` buffer.
FlashOutput block_sparse_attention_v2(const Tensor3& q, const Tensor3& k, const Tensor3& v, const HeadLayouts& layouts,
                                      std::optional<double> scale = {});

/// @ingroup ch03
/// Version 3: both tile products as OpenBLAS SGEMM calls, on runs of consecutive key blocks (up to
/// 1024 keys): the keys of a run are consecutive rows of K and V, so the SGEMMs read them where
/// they lie and nothing is packed; one online-softmax pass per run instead of one per block.
/// Measured on this project's machine, OpenBLAS's SGEMM on a 64 x 64 x 64 tile was faster than
/// v2's micro-kernels, and longer runs are faster still. Extra memory: per thread one score tile
/// of 64 x 1040 floats and one output tile.
FlashOutput block_sparse_attention_v3(const Tensor3& q, const Tensor3& k, const Tensor3& v, const HeadLayouts& layouts,
                                      std::optional<double> scale = {});

/// @ingroup ch03
/// The headline version (the last of `block_sparse_variants()`); see `ref::block_sparse_attention`
/// for the contract. `tiles_computed` counts the listed (query block, key block) pairs summed over
/// heads, `tiles_skipped` the other pairs of the block grid.
FlashOutput block_sparse_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const HeadLayouts& layouts,
                                   std::optional<double> scale = {});

/// The query tile and key tile of `sliding_window_attention`.
inline constexpr std::size_t kWindowTile = 64;

/// @ingroup ch03
/// See `ref::sliding_window_attention`. No layout: each query tile of `kWindowTile` rows takes
/// its key range from `AttentionMask{.window = window}.key_range_of_rows` and visits only the
/// key tiles (of `kWindowTile` keys, on the grid from key 0) that overlap it; inside a tile each
/// row hides the keys outside its own range \f$ [i' - w_l, i' + w_r] \f$ as \f$ -\infty \f$
/// scores. The products as in version 3: SGEMM on the runs of those tiles, K and V read in place.
/// `tiles_computed` and `tiles_skipped` count the tiles of that grid, over all heads.
FlashOutput sliding_window_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, SlidingWindow window,
                                     std::optional<double> scale = {});

/// One entry of the chapter's variant table of the block-sparse kernel.
struct BlockSparseVariant {
  std::string name;    ///< "v1", ...
  std::string change;  ///< the one improvement over the previous version
  FlashOutput (*function)(const Tensor3&, const Tensor3&, const Tensor3&, const HeadLayouts&, std::optional<double>);
};

/// @ingroup ch03
/// v1, v2, v3 in the order the lesson walks them; the last one is the headline version.
const std::vector<BlockSparseVariant>& block_sparse_variants();

}  // namespace tvlab::opt
