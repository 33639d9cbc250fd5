#pragma once
/// @file
/// Why attention divides by \f$ \sqrt{d_k} \f$: a Monte-Carlo experiment (chapter 00).
///
/// For \f$ q, k \f$ with independent N(0, 1) entries, \f$ \mathrm{Var}(q\cdot k) = d_k \f$; after dividing
/// by \f$ \sqrt{d_k} \f$ it is 1. Unscaled logits of standard deviation \f$ \sqrt{d_k} \f$ push the softmax
/// towards one-hot, where its Jacobian \f$ J = \mathrm{diag}(p) - pp^\top \f$ (the gradient path) vanishes.

#include <cstdint>

namespace tvlab::analysis {

struct ScalingStats {
  int head_dim = 0;
  double var_unscaled = 0;        ///< sample variance of \f$ q\cdot k \f$
  double var_scaled = 0;          ///< sample variance of \f$ q\cdot k/\sqrt{d_k} \f$
  double max_weight_unscaled = 0; ///< mean over rows of \f$ \max_j p_j \f$, unscaled logits
  double max_weight_scaled = 0;
  double jacobian_unscaled = 0;   ///< median over rows of \f$ \|\mathrm{diag}(p) - pp^\top\|_F \f$
  double jacobian_scaled = 0;
};

/// Draws `rows` queries and `rows * seq` keys with N(0, 1) entries (deterministic for a seed).
/// Throws `tvlab::Error` for head_dim, rows or seq <= 0.
ScalingStats dot_product_scaling(int head_dim, int rows, int seq, std::uint64_t seed);

/// \f$ \|\mathrm{diag}(p) - pp^\top\|_F = \sqrt{\sum_i p_i^2 (1 - 2 p_i) + (\sum_i p_i^2)^2} \f$.
double softmax_jacobian_frobenius(const double* p, int n);

}  // namespace tvlab::analysis
