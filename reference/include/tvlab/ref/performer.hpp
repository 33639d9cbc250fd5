#pragma once
/// @file
/// Chapter 06, the Performer's attention (FAVOR+, Choromanski et al. 2021, "Rethinking Attention with
/// Performers", sections 2.3-2.4), in plain loops with double accumulation. Linear attention with
/// a feature map \f$ \phi \f$ computes \f$ \phi(q)^\top \phi(k) \f$ in place of the softmax kernel
/// \f$ \exp(q^\top k / \sqrt d) \f$; the Performer chooses a *random* \f$ \phi \f$ whose inner product
/// equals the softmax kernel on average (Lemma 1):
/// \f[ \exp(x^\top y) = E_{\omega \sim \mathcal N(0, I_d)}\Big[\exp\big(\omega^\top x - \tfrac{\|x\|^2}{2}\big)\,
///                                                      \exp\big(\omega^\top y - \tfrac{\|y\|^2}{2}\big)\Big], \f]
/// because \f$ E[\exp(\omega^\top z)] = \exp(\|z\|^2/2) \f$ for \f$ z = x + y \f$ and
/// \f$ \|x + y\|^2/2 - \|x\|^2/2 - \|y\|^2/2 = x^\top y \f$. Averaging over m draws
/// \f$ \omega_1, \dots, \omega_m \f$ gives the positive random features
/// \f[ \phi^+(x) = \frac{e^{-\|x\|^2/2}}{\sqrt m}\,\big[e^{\omega_1^\top x}, \dots, e^{\omega_m^\top x}\big]^\top,
///     \qquad E\big[\phi^+(x)^\top \phi^+(y)\big] = \exp(x^\top y), \f]
/// an unbiased estimate whose variance falls as \f$ 1/m \f$ (Lemma 2):
/// \f$ \mathrm{Var} = \frac1m \exp(2x^\top y)\,\big(\exp(\|x + y\|^2) - 1\big) \f$ for iid rows. Every
/// feature is positive, so the normaliser of the attention never changes sign, which the earlier
/// trigonometric features (random Fourier features, \f$ \cos \f$ and \f$ \sin \f$ of \f$ \omega^\top x \f$)
/// could not promise. The documents introduce the Performer and its orthogonal features at
/// 004 L114 and the trade-off in m at 004 L118.

#include <cstddef>
#include <cstdint>

#include "tvlab/core/performer_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch06
/// Draws the m random features of a Performer for keys and queries of width d, from `seed` (the
/// deterministic `tvlab::Rng`: the same arguments give the same W on every platform). Training
/// redraws the features from time to time (Performer, section 4.2); here a redraw is a call with
/// another seed, which returns a new, independent W.
/// - Both kinds first draw the m rows one after the other, \f$ \omega_r \sim \mathcal N(0, I_d) \f$:
///   that is `RandomFeatureKind::iid`.
/// - `RandomFeatureKind::orthogonal` then orthogonalises those rows in blocks of d (the last block
///   m mod d rows when d does not divide m) by Gram-Schmidt,
///   \f$ u_r = g_r - \sum_{p<r} (g_r^\top \hat u_p)\, \hat u_p \f$ with \f$ \hat u_p = u_p / \|u_p\| \f$
///   (twice, so that rounding leaves them orthogonal to about \f$ 10^{-15} \f$): directions uniform on
///   the sphere and orthogonal within the block, independent between blocks. Each row keeps the
///   length of its Gaussian row, so the same seed gives the iid rows and their orthogonalised versions.
/// - `norms = RowNorms::sqrt_d` finally rescales every row to length \f$ \sqrt d \f$; see `RowNorms`.
/// @param num_features m >= 1
/// @param head_dim d >= 1
/// @return W `[m, d]`, with the recipe (kind, norms, seed)
PerformerFeatures draw_performer_features(std::size_t num_features, std::size_t head_dim, RandomFeatureKind kind,
                                          RowNorms norms, std::uint64_t seed);

/// @ingroup ch06
/// The checks of `performer_feature_map` on its inputs, for `function` (the optimized version runs
/// the same ones): W valid (`validate_performer_features`), x not empty, of the features' d, finite.
/// Throws `tvlab::Error` naming `features.w` or `x`.
void validate_performer_feature_map_inputs(const char* function, const Tensor3& x, const PerformerFeatures& features);

/// @ingroup ch06
/// The checks of `performer_attention` on its inputs, for `function` (the optimized version runs the
/// same ones): W valid, q, k, v not empty, with the heads of q, q and k of the features' d, v as long
/// as k, k as long as q when `causal`, every value finite. Throws `tvlab::Error` naming the parameter.
void validate_performer_attention_inputs(const char* function, const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                         const PerformerFeatures& features, bool causal);

/// @ingroup ch06
/// The positive random features of every row x of `x`, exactly as given (no scaling):
/// \f$ \phi^+(x)_r = \exp\big(\omega_r^\top x - \|x\|^2/2\big) / \sqrt m \f$, computed in double and
/// rounded once to float. For attention, the keys and queries are first scaled by \f$ d^{-1/4} \f$
/// (as `performer_attention` does). Throws, naming `x`, when a feature is beyond float's range
/// (\f$ \omega_r^\top x - \|x\|^2/2 > 88.7 + \ln\sqrt m \f$, 88.7 the logarithm of float's largest
/// value): scale x down. The exponent is at most \f$ \|\omega_r\|^2/2 \f$ (the maximum over x of
/// \f$ \|\omega\|\|x\| - \|x\|^2/2 \f$), so only rows longer than about 13 can reach it.
/// Features far below 1 underflow to 0 without error: they weigh nothing.
/// @param x `[h, n, d]`
/// @return \f$ \phi^+(x) \f$ `[h, n, m]`
Tensor3 performer_feature_map(const Tensor3& x, const PerformerFeatures& features);

/// @ingroup ch06
/// Performer attention (FAVOR+): linear attention with the positive random features, computed in
/// double. The queries and keys are scaled by \f$ d^{-1/4} \f$ each, \f$ \hat q = d^{-1/4} q \f$ and
/// \f$ \hat k = d^{-1/4} k \f$, so that \f$ \hat q^\top \hat k = q^\top k / \sqrt d \f$ and
/// \f$ \phi^+(\hat q)^\top \phi^+(\hat k) \f$ estimates the softmax kernel \f$ \exp(q^\top k / \sqrt d) \f$:
/// \f[ o_i = \frac{\phi^+(\hat q_i)^\top \sum_j \phi^+(\hat k_j)\, v_j^\top}
///            {\phi^+(\hat q_i)^\top \sum_j \phi^+(\hat k_j)}, \f]
/// over every key, or over \f$ j \le i \f$ when `causal` (the sums then grow with i, as in
/// `causal_linear_attention_recurrent`). With \f$ \phi^+ \f$ computed by `performer_feature_map` it is
/// `linear_attention` (or `causal_linear_attention_parallel`) with `FeatureMap::identity` and
/// `normalize = true`. As m grows, o approaches softmax attention with scale \f$ 1/\sqrt d \f$; the
/// error of each kernel estimate falls as \f$ m^{-1/2} \f$. One W serves every head.
///
/// Throws, naming the parameter: features of no row (m = 0), a d that is not the features' d,
/// non-finite inputs, and an input so large that \f$ \exp(\omega_r^\top \hat x - \|\hat x\|^2/2) \f$
/// overflows double (naming q or k: scale it down), or that the normaliser of a query underflows to
/// 0 (every product of features below \f$ 10^{-308} \f$, once \f$ \|\hat q\|^2/2 \f$ and
/// \f$ \|\hat k\|^2/2 \f$ reach hundreds: scale q and k down).
/// @param q `[h, n_q, d]`
/// @param k `[h, n_k, d]` (n_k = n_q when causal)
/// @param v `[h, n_k, d_v]`
/// @param features W `[m, d]`
/// @return `[h, n_q, d_v]`
Tensor3 performer_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const PerformerFeatures& features,
                            bool causal);

}  // namespace tvlab::ref
