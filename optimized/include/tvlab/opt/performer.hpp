#pragma once
/// @file
/// The Performer's positive random features and attention (FAVOR+) on the CPU (chapter 06). Must
/// match `tvlab::ref::performer_feature_map` and `tvlab::ref::performer_attention`: same names, same
/// contracts, same errors. The features W come from `ref::draw_performer_features`, shared by both.
///
/// The reference computes every exponent \f$ e_r = \omega_r^\top x - \|x\|^2/2 \f$ with d products in
/// double, one `std::exp` at a time, and sums in double. Here, per head (OpenMP threads over the
/// heads, OpenBLAS single-threaded inside each):
/// - the exponents of a whole head at once, \f$ E = X W^\top - \tfrac12 \|x\|^2 \f$ (one SGEMM, W
///   rounded once to float);
/// - the exponentials with xsimd's vectorised float exp;
/// - the attention as `opt::linear_attention` computes it over those features: \f$ S = \phi(K)^\top V \f$
///   and \f$ \phi(Q) S \f$ (SGEMMs), or, causal, the chunked form in chunks of 64 positions.
///
/// **Stabilised exponents.** Float's exp overflows past \f$ e = 88.7 \f$ (xsimd's from 88.38) where
/// double's reaches 709.8, and the scaled keys and queries of attention reach such exponents
/// (\f$ \|\hat x\| \approx 13 \f$ suffices). Attention is a ratio, so a factor common to numerator and
/// normaliser cancels (as the Performer's own code does): the keys of a head are shifted by their
/// largest exponent M, \f$ \exp(e_{jr} - M) \f$, and each query by its own, \f$ \exp(e_{ir} - c_i) \f$.
/// Every feature is then at most 1, and the largest of each query exactly 1. The \f$ 1/\sqrt m \f$ of
/// both cancels too and is left out.
///
/// **When the float result is not trusted.** A key whose exponents lie more than 87 below M
/// underflows to 0; a query that sees only such keys (a causal query early in a sequence whose later
/// keys are far larger) gets a normaliser of 0, and one that sees few of them loses digits. And the
/// reference's own limits (exponents beyond double's range, normalisers that underflow double) are
/// errors it reports. So the call gives way to `ref::performer_attention` (which returns the answer
/// or throws its error) when an exponent lies outside \f$ [-700, 700] \f$, when a stabilised
/// normaliser is below \f$ 2^{-60} \f$ (the features lost to underflow, each below \f$ 2^{-126} \f$,
/// are then under \f$ 2^{-66} \f$ of it per product), or when the true normaliser
/// \f$ e^{c_i + M}\,\text{den}_i / m \f$ (or it times max |v|) is within \f$ e^{\pm 700} \f$ of double's
/// limits. On ordinary inputs (q, k, v of unit scale) none of this happens.

#include "tvlab/core/performer_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// @ingroup ch06
/// The positive random features of every row x, exactly as given:
/// \f$ \phi^+(x)_r = \exp(\omega_r^\top x - \|x\|^2/2 - \ln\sqrt m) \f$ (the \f$ 1/\sqrt m \f$ inside the
/// exponent, so that a feature that fits in float is computed without an overflowing intermediate).
/// Per head: the exponents by one SGEMM into the output, then xsimd's exp in place. Rows whose
/// features come within \f$ e^{0.7} \f$ of float's largest value (beyond xsimd's exp) go to the
/// reference, which computes them or throws its error naming x. Features below float's smallest
/// normal value are 0 here where the reference may give a denormal (an absolute difference below
/// \f$ 1.2 \cdot 10^{-38} \f$). Same contract as `ref::performer_feature_map`.
/// @param x `[h, n, d]`
/// @return \f$ \phi^+(x) \f$ `[h, n, m]`
Tensor3 performer_feature_map(const Tensor3& x, const PerformerFeatures& features);

/// @ingroup ch06
/// Performer attention (FAVOR+) in float, with stabilised features (see the file's notes): per head,
/// \f$ \hat q = d^{-1/4} q \f$ and \f$ \hat k = d^{-1/4} k \f$, \f$ \phi(\hat K) = \exp(\hat K W^\top - \|\hat k\|^2/2 - M) \f$,
/// \f$ \phi(\hat Q) = \exp(\hat Q W^\top - \|\hat q\|^2/2 - c) \f$ (per row), then
/// \f$ o_i = \phi(\hat q_i)^\top S / \phi(\hat q_i)^\top z \f$ with \f$ S = \phi(\hat K)^\top V \f$ and
/// \f$ z = \phi(\hat K)^\top \mathbf 1 \f$ summed over every key, or over \f$ j \le i \f$ when `causal` (in
/// chunks of 64: the chunk's queries read the state of the chunks before it, plus their masked
/// products with the chunk's own keys). Work per head: \f$ 2 (n_q + n_k) m d \f$ for the exponents,
/// \f$ 2 (n_q + n_k) m d_v \f$ for the attention (causal adds \f$ 2 n C (m + d_v) \f$ within chunks).
/// Same contract as `ref::performer_attention`, whose answer or error it returns where float cannot
/// be trusted.
/// @param q `[h, n_q, d]`
/// @param k `[h, n_k, d]` (n_k = n_q when causal)
/// @param v `[h, n_k, d_v]`
/// @param features W `[m, d]`
/// @return `[h, n_q, d_v]`
Tensor3 performer_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const PerformerFeatures& features,
                            bool causal);

}  // namespace tvlab::opt
