#pragma once
/// @file
/// Chapter 03, the reference: attention restricted to a sparse pattern, in plain loops with
/// double accumulation. The optimized CPU (`tvlab/opt/sparse_attention.hpp`) and CUDA
/// (`tvlab/cuda/sparse_attention.hpp`) versions have the same names and signatures.
/// @ingroup ch03

#include <optional>

#include "tvlab/core/attention_mask.hpp"
#include "tvlab/core/flash_config.hpp"
#include "tvlab/core/sparse_pattern.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// Attention over the keys each query may see, head by head:
/// \f[ o_{hi} = \sum_{j \in S_{hi}} \frac{e^{s_{hij}}}{\sum_{j' \in S_{hi}} e^{s_{hij'}}}\, v_{hj},
///     \qquad s_{hij} = \text{scale}\; q_{hi} \cdot k_{hj}, \f]
/// with \f$ S_{hi} \f$ row i of `pattern_of_head(patterns, h)`. q `[heads, seq_q, d]`, k
/// `[heads, seq_k, d]`, v `[heads, seq_k, d_v]`; scale defaults to \f$ 1/\sqrt d \f$. A row with
/// no key has output 0 and log-sum-exp \f$ -\infty \f$ (as chapter 00 and chapter 04). Equal to
/// chapter 00's attention with `AttentionMask::allowed = pattern.to_mask()`.
FlashOutput sparse_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const HeadPatterns& patterns,
                             std::optional<double> scale = {});

/// The same attention with the pattern given as block layouts (one, or one per head):
/// `sparse_attention` over `to_pattern(layout)`. The block-sparse kernels take this form.
/// `tiles_computed` counts the listed (query block, key block) pairs summed over heads (the tiles a
/// block-sparse kernel visits), `tiles_skipped` the other pairs of each head's block grid.
FlashOutput block_sparse_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const HeadLayouts& layouts,
                                   std::optional<double> scale = {});

/// Sliding-window attention, with no pattern: query i sees keys
/// \f$ i' - w_l \le j \le i' + w_r \f$ with \f$ i' = i + n_k - n_q \f$ (bottom-right, as a KV cache),
/// so self-attention (\f$ n_q = n_k \f$) has \f$ i' = i \f$ and a causal window of \f$ w \f$ keys is
/// `{w - 1, 0}`. Requires seq_q <= seq_k.
FlashOutput sliding_window_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, SlidingWindow window,
                                     std::optional<double> scale = {});

}  // namespace tvlab::ref
