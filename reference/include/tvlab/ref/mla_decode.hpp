#pragma once
/// @file
/// Chapter 05, the attention core of MLA's absorbed decode step (DeepSeek-V2 section 2.1.2;
/// DeepSeek's inference code, `attn_impl = "absorb"`), in plain loops with double accumulation.
/// With the up-projections absorbed, one new token's attention is multi-query attention: each of
/// the \f$ n_h \f$ query heads reads the same cached keys \f$ [c^{KV}_j; k^R_j] \f$
/// (\f$ d_c + d_h^R \f$ wide) and the same values \f$ c^{KV}_j \f$ (\f$ d_c \f$ wide). This header
/// holds that core alone, so that an optimized version can be compared with it: the projections
/// before it and \f$ W^{UV}, W^O \f$ after it are `mla_absorbed`'s (`tvlab/ref/mla.hpp`).

#include <cstddef>

#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch05
/// What the absorbed decode attention returns for one new token.
struct MlaDecodeAttention {
  /// `[n_h, d_c]`: \f$ a_i = \sum_j p_{ij}\, c^{KV}_j \f$, the attention-weighted latent of head i,
  /// still to be up-projected by \f$ W^{UV}_i \f$ and \f$ W^O \f$.
  Tensor2 out_latent;
  /// `[n_h]`: \f$ L_i = \ln \sum_j e^{s_{ij}} \f$, the log of head i's softmax denominator (as
  /// flash attention's lse: what a later merge with another part of the cache needs).
  Tensor1 lse;
};

/// @ingroup ch05
/// The attention core of MLA's absorbed decode step: for the absorbed queries
/// \f$ \hat q_i = [\tilde q_i; q^R_i] \f$ of the new token, with \f$ \tilde q_i = W^{UK\top}_i q^C_i \f$,
/// against the first `length` cached positions,
/// \f[ s_{ij} = \text{scale}\,\big(\tilde q_i^\top c^{KV}_j + q^{R\top}_i k^R_j\big), \qquad
///     a_i = \sum_{j < \text{length}} \frac{e^{s_{ij}}}{\sum_{j'} e^{s_{ij'}}}\, c^{KV}_j, \qquad
///     L_i = \ln \sum_j e^{s_{ij}}. \f]
/// Every head reads the same \f$ c^{KV}_j \f$ and \f$ k^R_j \f$: multi-query attention with keys of
/// width \f$ d_c + d_h^R \f$ and values of width \f$ d_c \f$. MLA's scale is
/// \f$ 1/\sqrt{d_h + d_h^R} \f$ (`mla_softmax_scale`), not one over the root of the width here.
/// An absorbed `MlaCache`'s `latents` and `rope_keys` are the cache arguments as they are (there
/// `length` = `cache.tokens()`); a cache allocated for more positions passes its capacity-long
/// tensors, and the slots past `length` are never read.
/// @param q_absorbed `[n_h, d_c + d_h^R]`, row i is \f$ [\tilde q_i; q^R_i] \f$, finite
/// @param latents `[capacity, d_c]`, row j is \f$ c^{KV}_j \f$
/// @param rope_keys `[capacity, d_h^R]`, row j is \f$ k^R_j \f$ (RoPE applied)
/// @param length the cached positions to attend, in [1, capacity]; rows below it must be finite
/// @param scale the softmax scale, positive and finite
/// Throws `tvlab::Error` naming the parameter (`validate_mla_decode_attention`,
/// `check_mla_decode_cache`).
MlaDecodeAttention mla_absorbed_decode_attention(const Tensor2& q_absorbed, const Tensor2& latents,
                                                 const Tensor2& rope_keys, std::size_t length, double scale);

/// The checks of the absorbed decode attention that do not read the cache, shared by every
/// version for `function`: q_absorbed, latents and rope_keys non-empty; q_absorbed's columns the
/// sum of the columns of latents and of rope_keys (\f$ d_c + d_h^R \f$); rope_keys with the rows of
/// latents (the capacity); 1 <= length <= capacity; scale positive, finite and representable in
/// float; q_absorbed finite. Returns \f$ \max |\hat q| \f$ for `check_mla_decode_cache`.
double validate_mla_decode_attention(const char* function, const Tensor2& q_absorbed, const Tensor2& latents,
                                     const Tensor2& rope_keys, std::size_t length, double scale);

/// The checks that read the cache: rows [0, length) of latents and rope_keys finite, and, as every
/// attention of the project (chapter 00's `validate_attention`), the scores inside float's range,
/// \f$ \text{scale}\,(d_c + d_h^R) \max|\hat q| \max|[c^{KV}; k^R]| \le 10^{38} \f$. Throws
/// `tvlab::Error` naming latents or rope_keys (and the position), or saying what is too large.
/// @param q_max \f$ \max |\hat q| \f$, from `validate_mla_decode_attention`
void check_mla_decode_cache(const char* function, const Tensor2& latents, const Tensor2& rope_keys,
                            std::size_t length, double q_max, double scale);

}  // namespace tvlab::ref
