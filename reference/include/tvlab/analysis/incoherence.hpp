#pragma once
/// @file
/// Chapter 08, incoherence processing (QuIP, Chee et al. 2023; QuIP#, Tseng et al. 2024; 000 L263):
/// before quantizing W `[m, n]`, rotate it by random orthogonal matrices,
/// \f[ \tilde W = U\,W\,V^\top, \qquad U = H_m D_m, \quad V = H_n D_n, \f]
/// with \f$ H \f$ the normalised Walsh–Hadamard matrix (\f$ H^\top H = I \f$, entries \f$ \pm 1/\sqrt{n} \f$) and
/// \f$ D \f$ a diagonal of random signs; quantize \f$ \tilde W \f$; rotate back, \f$ \hat W = U^\top Q(\tilde W)\,V \f$.
/// A rotation keeps the Frobenius norm, so the error of \f$ \hat W \f$ is the error of \f$ Q(\tilde W) \f$; what it
/// changes is the shape of the distribution: every entry of \f$ \tilde W \f$ is a random-signed mixture of
/// a whole row and column of W, so an outlier is spread over all of them, and the largest entry,
/// which sets the quantization step, falls toward \f$ \lVert W \rVert_F / \sqrt{mn} \f$ times a small factor
/// (the matrix becomes "incoherent"). The transform costs \f$ O(mn \log(mn)) \f$ with the fast
/// Walsh–Hadamard transform; m and n must be powers of two here.

#include <cstdint>
#include <vector>

#include "tvlab/core/tensor.hpp"

namespace tvlab::analysis {

/// @ingroup ch08
/// \f$ U W V^\top \f$ (forward) or \f$ U^\top W V \f$ (inverse) with the random signs of `seed`. Errors: a
/// dimension that is not a power of two, an empty w, a value that is not finite.
DTensor2 incoherent_rotation(const DTensor2& w, std::uint64_t seed, bool inverse);

/// @ingroup ch08
/// \f$ \max|w| \,/\, (\lVert W \rVert_F / \sqrt{mn}) \f$: how many times the largest entry exceeds the root
/// mean square (1 for a matrix of equal magnitudes; large with outliers).
double coherence(const DTensor2& w);

/// @ingroup ch08
/// Symmetric b-bit rounding with one scale per row, \f$ s = \max_j |w_{ij}| / (2^{b-1} - 1) \f$ (for b = 2,
/// the 3 levels \f$ \{-s, 0, s\} \f$), ties to even. Errors: b outside 2..8.
DTensor2 round_rows(const DTensor2& w, int bits);

/// @ingroup ch08
/// A layer's relative output error when its weights w `[m, n]` are replaced by w_hat, on the inputs
/// x `[n, k]` (one per column): \f$ \lVert (W - \hat W) X \rVert_F / \lVert W X \rVert_F \f$, in double. Errors:
/// shapes that do not fit, an all-zero W X.
double weight_output_error(const DTensor2& w, const DTensor2& w_hat, const DTensor2& x);

/// @ingroup ch08
/// `round_rows` at b bits, directly and through the rotation: the weights' relative Frobenius error,
/// and the layer's output error on the inputs (`weight_output_error`).
struct IncoherenceRow {
  int bits = 0;
  double direct = 0.0, rotated = 0.0;                ///< \f$ \lVert W - \hat W \rVert_F / \lVert W \rVert_F \f$
  double output_direct = 0.0, output_rotated = 0.0;  ///< \f$ \lVert (W - \hat W) X \rVert_F / \lVert W X \rVert_F \f$
};

/// @ingroup ch08
/// The comparison for each number of bits, outputs on the columns of x `[n, k]`. Errors: those of
/// `incoherent_rotation`, `round_rows` and `weight_output_error`.
std::vector<IncoherenceRow> incoherence_table(const DTensor2& w, const std::vector<int>& bits, std::uint64_t seed,
                                              const DTensor2& x);

}  // namespace tvlab::analysis
