#pragma once
/// @file
/// Elementwise activations of the FFN (chapter 01).

#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch01
/// \f$ \mathrm{ReLU}(x) = \max(0, x) \f$.
Tensor2 relu(const Tensor2& x);

/// @ingroup ch01
/// Exact GELU (Hendrycks & Gimpel 2016): \f$ \mathrm{GELU}(x) = x\,\Phi(x) = \tfrac{x}{2}\big(1 + \mathrm{erf}(x/\sqrt2)\big) \f$.
Tensor2 gelu(const Tensor2& x);

/// @ingroup ch01
/// The tanh approximation used by GPT-2 and BERT's code:
/// \f$ \tfrac{x}{2}\big(1 + \tanh(\sqrt{2/\pi}\,(x + 0.044715\,x^3))\big) \f$.
Tensor2 gelu_tanh(const Tensor2& x);

/// @ingroup ch01
/// SiLU / Swish with \f$ \beta = 1 \f$: \f$ \mathrm{SiLU}(x) = x\,\sigma(x) = \dfrac{x}{1 + e^{-x}} \f$.
Tensor2 silu(const Tensor2& x);

}  // namespace tvlab::ref
