#pragma once
/// @file
/// Chapter 05, MLA's absorbed decode step on the CPU: the attention core of
/// `tvlab/ref/mla_decode.hpp`, in float, in numbered versions. In the absorbed form all
/// \f$ n_h \f$ query heads read one shared cache of \f$ d_c + d_h^R \f$ floats per token
/// (\f$ [c^{KV}_j; k^R_j] \f$ as keys, \f$ c^{KV}_j \f$ as values). v1 treats the heads as separate
/// attentions and so reads the cache \f$ n_h \f$ times per step; v2 stacks the heads as the rows of
/// one matrix, so that each cached row is read once per step and used by every head, as FlashMLA
/// and DeepSeek's inference code do. Must match `ref::mla_absorbed_decode_attention`.

#include <cstddef>
#include <string>
#include <vector>

#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/mla_decode.hpp"

namespace tvlab::opt {

// The result is the reference's: out_latent [n_h, d_c] and lse [n_h].
using ref::MlaDecodeAttention;

/// @ingroup ch05
/// v1: one head at a time (threads over heads). Head i streams the cache in tiles of positions:
/// its scores \f$ s_{ij} = \text{scale}\,(\tilde q_i \cdot c^{KV}_j + q^R_i \cdot k^R_j) \f$ as
/// contiguous SIMD dot products, chapter 04's online-softmax step on the tile, and
/// \f$ \tilde O_i \mathrel{+}= \sum_j \tilde p_{ij} c^{KV}_j \f$ as SIMD axpys. Each head reads the
/// whole cache, \f$ n_h \f$ times \f$ (d_c + d_h^R) \f$ floats per token and step: what the absorbed
/// form saves in memory it does not yet save in reads. Same arguments and errors as the reference.
MlaDecodeAttention mla_absorbed_decode_attention_v1(const Tensor2& q_absorbed, const Tensor2& latents,
                                                    const Tensor2& rope_keys, std::size_t length, double scale);

/// @ingroup ch05
/// v2 with the cached positions cut into `splits` contiguous ranges (split-K, as FlashDecoding):
/// each range, on its own thread, keeps a partial state per head (its maximum \f$ m \f$, sum
/// \f$ \ell \f$ and unnormalised accumulator \f$ \tilde O \f$, `[n_h, d_c]`), working through tiles of
/// positions with the heads as the rows of two SGEMMs,
/// \f[ S = \text{scale}\; \hat Q\, [C_{KV}; K^R]^\top_{\text{tile}} \;\; (n_h \times \text{tile}), \qquad
///     \tilde O \mathrel{+}= \tilde P\, C_{KV,\text{tile}} \;\; (n_h \times d_c), \f]
/// with chapter 04's online-softmax step on every row of S in between. The partial states are then
/// merged per head with chapter 04's `online_softmax_merge`:
/// \f$ m = \max_r m_r,\ \ell = \sum_r e^{m_r - m} \ell_r,\ O = \sum_r e^{m_r - m} \tilde O_r / \ell \f$.
/// The result does not depend on `splits` beyond rounding. Extra memory: `splits` partial states,
/// \f$ \text{splits} \cdot n_h (d_c + 2) \f$ floats, and one score tile per thread.
/// @param splits how many ranges, >= 1; more than `length` is clamped to `length` (one position each)
MlaDecodeAttention mla_absorbed_decode_attention_split_k(const Tensor2& q_absorbed, const Tensor2& latents,
                                                         const Tensor2& rope_keys, std::size_t length, double scale,
                                                         std::size_t splits);

/// @ingroup ch05
/// v2: all heads at once as the rows of a matrix product against the shared cache (see
/// `mla_absorbed_decode_attention_split_k`), the positions split across the threads: one range
/// per thread, and no range shorter than a tile. Every cached row is read from memory once per
/// step, \f$ (d_c + d_h^R) \f$ floats per token, whatever \f$ n_h \f$; the arithmetic
/// (\f$ 2 n_h (2 d_c + d_h^R) \f$ flops per token) runs at SGEMM speed instead of v1's dot products.
MlaDecodeAttention mla_absorbed_decode_attention_v2(const Tensor2& q_absorbed, const Tensor2& latents,
                                                    const Tensor2& rope_keys, std::size_t length, double scale);

/// One entry of the absorbed decode's variant table: tests and timings iterate over it in order.
struct MlaDecodeVariant {
  std::string name;    ///< "v1", ...
  std::string change;  ///< the one improvement over the previous version
  MlaDecodeAttention (*function)(const Tensor2&, const Tensor2&, const Tensor2&, std::size_t, double);
};

/// @ingroup ch05
/// v1, v2 in the order the lesson walks them; the last one is the headline version.
const std::vector<MlaDecodeVariant>& mla_decode_variants();

/// @ingroup ch05
/// The headline version (the last of `mla_decode_variants()`), the optimized counterpart of
/// `ref::mla_absorbed_decode_attention`: same arguments, same result up to float rounding, same
/// errors. The cache's checks (finite, scores inside float's range) take the largest \f$ |value| \f$ of
/// each tile as it streams through, so that valid input is read from memory once per step; the
/// cache is scanned again only to name a bad value.
MlaDecodeAttention mla_absorbed_decode_attention(const Tensor2& q_absorbed, const Tensor2& latents,
                                                 const Tensor2& rope_keys, std::size_t length, double scale);

}  // namespace tvlab::opt
