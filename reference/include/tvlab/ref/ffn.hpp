#pragma once
/// @file
/// Position-wise feed-forward networks (chapter 01): ReLU, GELU and SwiGLU variants.

#include "tvlab/core/ffn_types.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch01
/// \f$ \mathrm{FFN}_{ReLU}(x) = \max(0, xW_1 + b_1)\,W_2 + b_2 \f$ (Vaswani et al. 2017).
/// @param x `[tokens, d_model]` @return `[tokens, d_model]`
Tensor2 ffn_relu(const Tensor2& x, const FfnWeights& w);

/// @ingroup ch01
/// \f$ \mathrm{FFN}_{GELU}(x) = \mathrm{GELU}(xW_1 + b_1)\,W_2 + b_2 \f$ with the exact (erf) GELU.
Tensor2 ffn_gelu(const Tensor2& x, const FfnWeights& w);

/// @ingroup ch01
/// \f$ \mathrm{FFN}_{SwiGLU}(x) = \big(\mathrm{Swish}(xW_1) \odot xW_2\big)\,W_3 \f$ (Shazeer 2020).
Tensor2 ffn_swiglu(const Tensor2& x, const SwigluWeights& w);

}  // namespace tvlab::ref
