#pragma once
/// @file
/// LayerNorm and RMSNorm, forward and backward (chapter 01), written as loops.

#include "tvlab/core/norm_types.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch01
/// LayerNorm of every row of x `[tokens, d_model]`:
/// \f$ \mu = \tfrac1d\sum_j x_j,\; \sigma^2 = \tfrac1d\sum_j (x_j-\mu)^2,\;
///     y_j = \gamma_j \dfrac{x_j - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta_j \f$.
Tensor2 layer_norm(const Tensor2& x, const Tensor1& gamma, const Tensor1& beta, double eps = 1e-5);

/// @ingroup ch01
/// Backward of `layer_norm` for upstream gradient dy. With \f$ \hat x = (x-\mu)/\sigma \f$,
/// \f$ g = \gamma \odot dy \f$:
/// \f$ dx = \tfrac{1}{\sigma}\big(g - \overline{g} - \hat x\,\overline{g\hat x}\big) \f$,
/// \f$ d\gamma = \sum_{rows} dy \odot \hat x \f$, \f$ d\beta = \sum_{rows} dy \f$
/// (bars are means over the row).
LayerNormGrads layer_norm_backward(const Tensor2& x, const Tensor1& gamma, const Tensor2& dy, double eps = 1e-5);

/// @ingroup ch01
/// RMSNorm (Zhang & Sennrich 2019): \f$ r = \sqrt{\tfrac1d\sum_j x_j^2 + \epsilon},\; y_j = \gamma_j x_j / r \f$.
/// No mean subtraction, no bias.
Tensor2 rms_norm(const Tensor2& x, const Tensor1& gamma, double eps = 1e-6);

/// @ingroup ch01
/// Backward of `rms_norm`: with \f$ \hat x = x/r \f$, \f$ g = \gamma\odot dy \f$:
/// \f$ dx = \tfrac1r\big(g - \hat x\,\overline{g\hat x}\big) \f$, \f$ d\gamma = \sum_{rows} dy\odot\hat x \f$.
RmsNormGrads rms_norm_backward(const Tensor2& x, const Tensor1& gamma, const Tensor2& dy, double eps = 1e-6);

}  // namespace tvlab::ref
