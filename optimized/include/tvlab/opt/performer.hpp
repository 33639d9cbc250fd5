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
/// The exponents and features of a block of rows (64 keys, 256 queries, or a causal chunk of 64)
/// are made while the block is in cache, and the queries' and causal keys' are used there: the only
/// \f$ [n, m] \f$ buffer is the non-causal keys' features, which every query reads.
///
/// **Stabilised exponents.** Float's exp overflows past \f$ e = 88.7 \f$ (xsimd's from 88.38) where
/// double's reaches 709.8, and the scaled keys and queries of attention reach such exponents
/// (\f$ \|\hat x\| \approx 13 \f$ suffices). The kernel is a sum over the features,
/// \f$ \phi(q)^\top \phi(k) = \sum_r e^{e_r(q)} e^{e_r(k)} / m \f$, so a shift \f$ M_r \f$ taken from feature r
/// of every key can be given to feature r of every query, and a shift common to one query's
/// numerator and normaliser cancels in its ratio:
/// \f$ \phi(\hat k_j)_r = \exp(e_{jr} - M_r) \f$ with \f$ M_r = \max_j e_{jr} \f$, and
/// \f$ \phi(\hat q_i)_r = \exp(e_{ir} + M_r - c_i) \f$ with \f$ c_i = \max_r (e_{ir} + M_r) \f$.
/// Every feature is then at most 1, every column of key features and every row of query features
/// holds a 1, and a non-causal normaliser is at least 1. The causal form takes \f$ M_r \f$ over the
/// keys so far: a chunk that raises it rescales row r of the state by
/// \f$ \exp(M_r^{\text{old}} - M_r^{\text{new}}) \f$ first (as flash attention rescales its running
/// sums). The \f$ 1/\sqrt m \f$ of both features cancels too and is left out.
///
/// **When the float result is not trusted.** A key feature more than 87 below its column's largest
/// underflows to 0; a causal query whose largest products are with keys after it in its chunk, or
/// far below keys already seen, can be left with a tiny normaliser, or 0. And the reference's own
/// limits (exponents beyond double's range, normalisers that underflow double) are errors it
/// reports. So the call gives way to `ref::performer_attention` (which returns the answer or throws
/// its error) when an exponent lies outside \f$ [-700, 700] \f$, when a stabilised normaliser is
/// below \f$ 2^{-100} n_k m \f$ (the products lost to underflow, each below \f$ 2^{-126} \f$ and at most
/// \f$ n_k m \f$ of them, are then under \f$ 2^{-26} \f$ of it), or when the true normaliser
/// \f$ e^{c_i}\,\text{den}_i / m \f$ (or it times max |v|) lies outside \f$ [e^{-700}, e^{700}] \f$, near
/// double's limits.
/// On ordinary inputs (q, k, v of unit scale) none of this happens.

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
/// \f$ \hat q = d^{-1/4} q \f$ and \f$ \hat k = d^{-1/4} k \f$, the exponents \f$ \hat K W^\top - \|\hat k\|^2/2 \f$
/// and \f$ \hat Q W^\top - \|\hat q\|^2/2 \f$ (SGEMMs), shifted and exponentiated (xsimd), then
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
