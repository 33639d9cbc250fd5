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

enum class NormKind { layer_norm, rms_norm };

/// Checks x `[tokens, d_model]`, gamma (and beta, dy when given) `[d_model]` / `[tokens, d_model]`
/// and eps (finite, >= 0) for `function`. Throws `tvlab::Error` naming the parameter.
/// `check_x_values = false` skips the scan of x for NaN/inf: a caller that finds them in its own
/// statistics pass (opt's fused kernels) saves one full read of x.
/// With eps = 0 a row whose variance (LayerNorm) or mean square (RMSNorm) is 0 has no defined
/// output (0/0) and is an error too.
void validate_norm(const char* function, NormKind kind, const Tensor2& x, const Tensor1& gamma, const Tensor1* beta,
                   const Tensor2* dy, double eps, bool check_x_values = true);

}  // namespace tvlab
