#pragma once
/// @file
/// Chapter 03, optimized CPU: the block-sparse flash kernel (chapter 04's online softmax over
/// only the non-empty blocks of a layout; no n x n buffer; threads over (head, query block)) and
/// the sliding-window kernel that needs no layout (each query tile's key range computed from its
/// rows). Same names and signatures as `tvlab/ref/sparse_attention.hpp`.
/// @ingroup ch03

#include <optional>

#include "tvlab/core/attention_mask.hpp"
#include "tvlab/core/flash_config.hpp"
#include "tvlab/core/sparse_pattern.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// See `ref::block_sparse_attention`. `tiles_computed` counts the (query block, key block) pairs
/// visited, summed over heads.
FlashOutput block_sparse_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const HeadLayouts& layouts,
                                   std::optional<double> scale = {});

/// See `ref::sliding_window_attention`.
FlashOutput sliding_window_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, SlidingWindow window,
                                     std::optional<double> scale = {});

}  // namespace tvlab::opt
