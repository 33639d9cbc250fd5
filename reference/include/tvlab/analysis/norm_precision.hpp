#pragma once
/// @file
/// How float32 arithmetic treats LayerNorm and RMSNorm on rows whose mean is large against their
/// spread (chapter 01): a double-precision oracle, the textbook float32 loops of both norms, and
/// the two error measures that tell them apart.
///
/// A LayerNorm that computes \f$ \mu \f$ in float carries an absolute error of about
/// \f$ u\,|\mu| \f$ (u = 2^-24) into every \f$ x_j - \mu \f$, which is then divided by
/// \f$ \sigma \f$: a relative output error that grows like \f$ u\,|\mu|/\sigma \f$. RMSNorm has no
/// subtraction, so its output is accurate relative to its own size; but when \f$ |\mu| \gg \sigma \f$
/// that output is nearly constant and the row's information sits in its last bits.

#include "tvlab/core/tensor.hpp"

namespace tvlab::analysis {

/// LayerNorm of each row with \f$ \gamma = 1, \beta = 0 \f$, computed in double from the float input:
/// \f$ y_j = (x_j - \mu)/\sqrt{\sigma^2 + \epsilon} \f$. Shapes `[tokens, d_model]`.
DTensor2 layer_norm_exact(const Tensor2& x, double eps);
/// RMSNorm with \f$ \gamma = 1 \f$ in double: \f$ y_j = x_j / \sqrt{\overline{x^2} + \epsilon} \f$.
DTensor2 rms_norm_exact(const Tensor2& x, double eps);

/// The textbook float32 LayerNorm: a float sum for \f$ \mu \f$, a second float pass for
/// \f$ \sigma^2 \f$ around it, then \f$ (x_j - \mu)/\sqrt{\sigma^2 + \epsilon} \f$, every operation
/// in float and in order (no compensation, no shift). What a plain float kernel does.
Tensor2 layer_norm_float32(const Tensor2& x, double eps);
/// The textbook float32 RMSNorm: a float sum of squares, then \f$ x_j / r \f$ in float.
Tensor2 rms_norm_float32(const Tensor2& x, double eps);

/// \f$ \max_{\text{rows}} \max_j |y_j - y^*_j| / \max_j |y^*_j| \f$: the error relative to the
/// output's size. Throws `tvlab::Error` naming `y` when the shapes differ.
double normwise_relative_error(const Tensor2& y, const DTensor2& exact);
/// \f$ \max_{\text{rows}} \max_j |y_j - y^*_j| / \mathrm{std}_j(y^*) \f$: the error relative to the
/// part of the output that differs between features (for LayerNorm the two measures agree, since
/// its output has standard deviation about 1 and a maximum of a few).
double spread_relative_error(const Tensor2& y, const DTensor2& exact);

}  // namespace tvlab::analysis
