#pragma once
/// @file
/// Chapter 06, the low-rank dilemma made visible (000 L117, L485-L487): the matrix of kernel weights
/// of linear attention, \f$ A_{ij} \propto \phi(q_i)^\top \phi(k_j) \f$, is a product of an
/// \f$ n \times m \f$ and an \f$ m \times n \f$ matrix, so its rank is at most the feature dimension m,
/// however long the sequence; a softmax attention matrix \f$ P_{ij} \propto e^{q_i^\top k_j / \sqrt d} \f$
/// has full rank n for distinct queries and keys in general. Measured here on the same queries and
/// keys: the singular values of both matrices (rows normalised to sum to one) and the entropy of
/// their rows.

#include <cstdint>
#include <vector>

#include "tvlab/core/linear_attention_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::analysis {

/// @ingroup ch06
/// A thin singular value decomposition \f$ A = U\,\mathrm{diag}(\sigma)\,V^\top \f$ of a `[r, c]`, r >= c:
/// u `[r, c]` with orthonormal columns (a column is 0 where its \f$ \sigma \f$ is), sigma decreasing,
/// v `[c, c]` orthogonal.
struct Svd {
  DTensor2 u;
  std::vector<double> sigma;
  DTensor2 v;
};

/// @ingroup ch06
/// The decomposition by one-sided Jacobi rotations in double (Hestenes' method): rotate pairs of
/// columns of A, and the same columns of V (from the identity), until every pair of columns of A is
/// orthogonal; their norms are then the singular values. Accurate to about 1e-14 relative to the largest.
Svd svd(const DTensor2& a);

/// @ingroup ch06
/// The singular values of a (square or tall) matrix a `[r, c]`, r >= c, in decreasing order, by
/// one-sided Jacobi rotations in double (Hestenes' method): rotate pairs of columns until every
/// pair is orthogonal; the column norms are then the singular values. Accurate to about 1e-14
/// relative to the largest, which is what a rank count needs.
std::vector<double> singular_values(const DTensor2& a);

/// @ingroup ch06
/// The number of singular values above `relative_tolerance` times the largest.
std::size_t numerical_rank(const std::vector<double>& singular_values, double relative_tolerance = 1e-10);

/// @ingroup ch06
/// What `low_rank_dilemma` measures for one matrix of attention weights (rows summing to one).
struct AttentionMatrixSpectrum {
  std::vector<double> singular_values;  ///< decreasing
  std::size_t rank = 0;                 ///< `numerical_rank` at 1e-10
  double mean_row_entropy = 0.0;        ///< \f$ -\frac1n \sum_i \sum_j P_{ij} \ln P_{ij} \f$, nats; \f$ \ln n \f$ for uniform rows
};

/// @ingroup ch06
/// Softmax and linear attention on the same queries and keys.
struct LowRankReport {
  AttentionMatrixSpectrum softmax;  ///< \f$ P_{ij} = e^{s_{ij}} / \sum_l e^{s_{il}} \f$, \f$ s = q^\top k / \sqrt d \f$
  AttentionMatrixSpectrum linear;   ///< \f$ A_{ij} = \phi(q_i)^\top\phi(k_j) / \sum_l \phi(q_i)^\top\phi(k_l) \f$
};

/// @ingroup ch06
/// Draws n queries and keys of width d, N(0, 1) entries (seeded), and measures both matrices
/// (non-causal, one head). Throws unless n >= 1, d >= 1 and the feature map gives non-zero
/// normalisers (ReLU may not: use elu_plus_one).
LowRankReport low_rank_dilemma(std::size_t n, std::size_t d, FeatureMap map, std::uint64_t seed);

}  // namespace tvlab::analysis
