#pragma once
/// @file
/// Chapter 03, generation with a sliding window: the rolling KV cache of Mistral 7B (Jiang et al.
/// 2023, "Rolling Buffer Cache"), which keeps the keys and values of the last \f$ w \f$ positions
/// only, so that decoding past the window needs \f$ O(w) \f$ memory however many tokens were
/// generated, and gives the outputs of full-sequence causal window attention
/// (`ref::sliding_window_attention` with `{w - 1, 0}`).
/// @ingroup ch03

#include <cstddef>
#include <optional>
#include <vector>

#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// @ingroup ch03
/// A ring buffer of \f$ w \f$ key and value slots per head. Position \f$ t \f$ (the \f$ t \f$-th
/// token appended, from 0) goes to slot \f$ t \bmod w \f$, overwriting position \f$ t - w \f$,
/// which no later query may see: the query at position \f$ t \f$ attends to
/// \f$ \max(0, t - w + 1) \le j \le t \f$, exactly the slots held. The order of the slots is not
/// the order of the positions, and need not be: a softmax is a sum over a set.
class WindowKvCache {
 public:
  /// An empty cache for `heads` heads of keys of `head_dim` and values of `head_dim_v` elements,
  /// window \f$ w \ge 1 \f$ (`window`; signed so that a negative width gets a clear error). Allocates
  /// every slot now: its memory never changes afterwards.
  WindowKvCache(std::size_t heads, std::size_t head_dim, std::size_t head_dim_v, long long window);

  /// Stores the next position's key `k_t` `[heads, head_dim]` and value `v_t` `[heads, head_dim_v]`
  /// in slot \f$ t \bmod w \f$.
  void append(const Tensor2& k_t, const Tensor2& v_t);

  /// The attention of the last appended position's query `q_t` `[heads, head_dim]` over the
  /// positions held: \f$ o_h = \sum_j \mathrm{softmax}_j(\text{scale}\; q_h \cdot k_{hj})\, v_{hj} \f$,
  /// `[heads, head_dim_v]`; scale defaults to \f$ 1/\sqrt{d} \f$. In float: scores, then their
  /// maximum, then \f$ e^{s_j - m} \f$ and the weighted sum (contiguous `omp simd` loops).
  Tensor2 attend(const Tensor2& q_t, std::optional<double> scale = {}) const;

  std::size_t window() const { return window_; }  ///< \f$ w \f$
  std::size_t tokens() const { return tokens_; }  ///< positions appended so far
  /// Positions held: \f$ \min(\text{tokens}, w) \f$.
  std::size_t size() const { return tokens_ < window_ ? tokens_ : window_; }
  /// Bytes of the key and value slots, \f$ 4\,h\,w\,(d + d_v) \f$, and of each slot's largest \f$ |k| \f$ (\f$ 8w \f$):
  /// independent of `tokens()`.
  std::size_t bytes() const {
    return (keys_.capacity() + values_.capacity()) * sizeof(float) + slot_max_.capacity() * sizeof(double);
  }

 private:
  std::size_t heads_, head_dim_, head_dim_v_, window_;
  std::size_t tokens_ = 0;
  std::vector<float> keys_;    // [heads, w, head_dim]: slot s of head h at (h w + s) head_dim
  std::vector<float> values_;  // [heads, w, head_dim_v]
  std::vector<double> slot_max_;  // [w]: max |k| of each slot's key over the heads (for the overflow check)
};

}  // namespace tvlab::opt
