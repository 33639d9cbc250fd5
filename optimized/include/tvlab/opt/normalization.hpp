#pragma once
/// @file
/// Fused, vectorised, threaded LayerNorm and RMSNorm (chapter 01).
/// Must match `tvlab::ref::layer_norm`, `ref::rms_norm` and their backwards.

#include "tvlab/core/norm_types.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// @ingroup ch01
/// Rows in parallel (OpenMP); per row one pass for the statistics and one fused
/// normalise-scale-shift pass, both SIMD loops in float (the reference accumulates in double).
Tensor2 layer_norm(const Tensor2& x, const Tensor1& gamma, const Tensor1& beta, double eps = 1e-5);
/// @ingroup ch01
/// dx row by row in parallel; dgamma/dbeta as per-thread partial sums, added at the end.
LayerNormGrads layer_norm_backward(const Tensor2& x, const Tensor1& gamma, const Tensor2& dy, double eps = 1e-5);
/// @ingroup ch01
/// One SIMD pass for \f$ \sum x^2 \f$, one for \f$ \gamma x / r \f$: no mean, so one pass less than LayerNorm.
Tensor2 rms_norm(const Tensor2& x, const Tensor1& gamma, double eps = 1e-6);
/// @ingroup ch01
RmsNormGrads rms_norm_backward(const Tensor2& x, const Tensor1& gamma, const Tensor2& dy, double eps = 1e-6);

}  // namespace tvlab::opt
