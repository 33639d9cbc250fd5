#pragma once
/// @file
/// Chapter 03 on a CUDA device, host tensors in and out: the block-sparse flash kernel and the
/// sliding-window kernel. Same names, signatures, checks and error messages as
/// `tvlab/ref/sparse_attention.hpp`; the device-pointer entry points are in
/// `tvlab/cuda/sparse_attention_device.hpp`.
/// @ingroup ch03

#include <optional>

#include "tvlab/core/attention_mask.hpp"
#include "tvlab/core/flash_config.hpp"
#include "tvlab/core/sparse_pattern.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::cuda {

/// @ingroup ch03
/// See `ref::block_sparse_attention`. One thread block per (head, query block of the layout),
/// one thread per query row (a query block of more than 1024 rows is split over several thread
/// blocks); the block walks only the key blocks the layout lists for its query block, staging
/// their keys and values in shared memory, and applies a partial block's byte mask. Every head
/// runs in one launch, each with its own layout when there is one per head (tile sizes may differ
/// between them). `tiles_computed` counts the (query block, key block) pairs visited, summed over
/// heads, as the reference does; `tiles_skipped` stays 0, as there.
FlashOutput block_sparse_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const HeadLayouts& layouts,
                                   std::optional<double> scale = {});

/// @ingroup ch03
/// See `ref::sliding_window_attention`. One thread block per (head, query tile of 64 rows), one
/// thread per query row; the block stages only the key tiles of 64 keys (fewer where shared memory
/// would not hold 64 keys and values) that meet its rows' windows, so the work grows with
/// \f$ n (w_l + w_r) \f$, not \f$ n^2 \f$. No layout: each row's key range comes from its index.
/// `tiles_computed` and `tiles_skipped` count the (query tile, key tile) pairs visited and
/// skipped, summed over heads (the reference, which has no tiles, leaves them 0).
FlashOutput sliding_window_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, SlidingWindow window,
                                     std::optional<double> scale = {});

}  // namespace tvlab::cuda
