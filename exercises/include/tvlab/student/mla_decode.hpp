#pragma once
/// @file
/// Exercise 05.3: the scores of MLA's absorbed decode step (DeepSeek-V2, section 2.1.2): each
/// head's content query moved into latent space through \f$ W^{UK} \f$ and scored against the cached
/// latents, plus the decoupled RoPE part. Equal to the scores of the naive path against the
/// expanded keys (`tvlab::ref::mla_naive`'s cache); the softmax over them is what
/// `tvlab::ref::mla_absorbed_decode_attention` computes.

#include "tvlab/core/mla_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::student {

/// @ingroup ch05
/// The scores of one new token's \f$ n_h \f$ heads against \f$ n \f$ cached positions:
/// \f[ \tilde q_i = W^{UK\top}_i q^C_i \in \mathbb{R}^{d_c}, \qquad
///     s_{ij} = \frac{\tilde q_i^\top c^{KV}_j + q^{R\top}_i k^R_j}{\sqrt{d_h + d_h^R}}, \f]
/// where \f$ W^{UK}_i \f$ is columns \f$ [i d_h, (i+1) d_h) \f$ of `w_uk`. Equal to
/// \f$ [q^C_i; q^R_i] \cdot [W^{UK}_i c^{KV}_j; k^R_j] / \sqrt{d_h + d_h^R} \f$ without building the
/// keys.
/// @param q_nope \f$ q^C \f$ `[n_h, d_h]`, one row per head
/// @param q_rope \f$ q^R \f$ `[n_h, d_h^R]`, RoPE applied
/// @param w_uk \f$ W^{UK} \f$ `[d_c, n_h d_h]`
/// @param latents \f$ c^{KV} \f$ `[n, d_c]`, one row per cached position
/// @param rope_keys \f$ k^R \f$ `[n, d_h^R]`, RoPE applied
/// @param cfg the layer's dimensions (\f$ n_h, d_c, d_h, d_h^R \f$)
/// @return the scores `[n_h, n]`
/// Throws `tvlab::Error` naming the parameter for a bad configuration, a shape that disagrees with
/// `cfg`, an empty cache or a value that is not finite.
Tensor2 mla_absorbed_scores(const Tensor2& q_nope, const Tensor2& q_rope, const Tensor2& w_uk, const Tensor2& latents,
                            const Tensor2& rope_keys, const MlaConfig& cfg);

}  // namespace tvlab::student
