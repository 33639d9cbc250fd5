#pragma once
/// @file
/// Types and input checks shared by every normalization implementation (chapter 01).

#include "tvlab/core/tensor.hpp"

namespace tvlab {

/// Gradients of LayerNorm with respect to its input, gain and bias.
struct LayerNormGrads {
  Tensor2 dx;      ///< `[tokens, d_model]`
  Tensor1 dgamma;  ///< `[d_model]`
  Tensor1 dbeta;   ///< `[d_model]`
};

/// Gradients of RMSNorm with respect to its input and gain.
struct RmsNormGrads {
  Tensor2 dx;      ///< `[tokens, d_model]`
  Tensor1 dgamma;  ///< `[d_model]`
};

/// Checks x `[tokens, d_model]`, gamma (and beta, dy when given) `[d_model]` / `[tokens, d_model]`
/// and eps (finite, >= 0) for `function`. Throws `tvlab::Error` naming the parameter.
void validate_norm(const char* function, const Tensor2& x, const Tensor1& gamma, const Tensor1* beta,
                   const Tensor2* dy, double eps);

}  // namespace tvlab
