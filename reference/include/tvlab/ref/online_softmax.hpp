#pragma once
/// @file
/// The online softmax (chapter 04): a softmax computed while the logits stream past in blocks,
/// keeping only a running maximum and a running sum. It is what lets flash attention avoid
/// storing a whole row of scores.

#include <cstddef>
#include <limits>
#include <span>

#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch04
/// The state of a softmax over the logits seen so far: \f$ m = \max_j x_j \f$ and
/// \f$ \ell = \sum_j e^{x_j - m} \f$. The empty state is \f$ (-\infty, 0) \f$.
struct SoftmaxState {
  double max = -std::numeric_limits<double>::infinity();
  double sum = 0.0;
};

/// @ingroup ch04
/// Folds one block of logits into the state:
/// \f$ m' = \max(m, \max_j x_j) \f$, \f$ \ell' = \ell\,e^{m - m'} + \sum_j e^{x_j - m'} \f$.
/// \f$ -\infty \f$ logits (masked) add nothing; NaN or \f$ +\infty \f$ throws `tvlab::Error`.
SoftmaxState online_softmax_update(SoftmaxState state, std::span<const float> block);

/// @ingroup ch04
/// Combines the states of two disjoint parts of a row (any split, any order):
/// \f$ m = \max(m_a, m_b) \f$, \f$ \ell = \ell_a e^{m_a - m} + \ell_b e^{m_b - m} \f$.
SoftmaxState online_softmax_merge(SoftmaxState a, SoftmaxState b);

/// @ingroup ch04
/// Row-wise softmax of `x` `[rows, cols]` in two passes over blocks of `block` columns: pass 1
/// streams the blocks through `online_softmax_update`, pass 2 writes \f$ e^{x_j - m} / \ell \f$.
/// Equal to `ref::softmax` for every block size (a row of only \f$ -\infty \f$ gives zeros).
/// Throws `tvlab::Error` for block = 0, an empty x, NaN or \f$ +\infty \f$.
Tensor2 online_softmax(const Tensor2& x, std::size_t block);

}  // namespace tvlab::ref
