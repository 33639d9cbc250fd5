#pragma once
/// @file
/// Row-wise softmax, the numerically stable way (chapter 00).

#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch00
/// Softmax of every row of `x` `[rows, cols]`:
/// \f$ \mathrm{softmax}(x)_{ij} = \dfrac{e^{x_{ij} - m_i}}{\sum_k e^{x_{ik} - m_i}},\; m_i = \max_k x_{ik} \f$.
/// Subtracting the row maximum changes nothing mathematically and keeps every exponent
/// \f$ \le 0 \f$, so nothing overflows. Entries equal to \f$ -\infty \f$ get weight 0; a row of
/// only \f$ -\infty \f$ returns zeros. NaN or \f$ +\infty \f$ throws `tvlab::Error`.
Tensor2 softmax(const Tensor2& x);

}  // namespace tvlab::ref
