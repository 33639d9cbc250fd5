#pragma once
/// @file
/// Fused, vectorised, threaded LayerNorm and RMSNorm (chapter 01).
/// Must match `tvlab::ref::layer_norm`, `ref::rms_norm` and their backwards.

#include "tvlab/core/norm_types.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// @ingroup ch01
/// Rows in parallel (OpenMP); per row SIMD passes in float for the statistics (the row stays in
/// cache) and one fused normalise-scale-shift pass. x is checked for NaN/inf through the
/// statistics instead of a separate scan, so x crosses the memory bus once and y once. Rows whose
/// float sums overflow (|x| > 1.8e19) are redone in double.
Tensor2 layer_norm(const Tensor2& x, const Tensor1& gamma, const Tensor1& beta, double eps = 1e-5);
/// @ingroup ch01
/// As `layer_norm`, writing into `y` (reshaped to x's shape if it differs). With a `y` of the right
/// shape nothing is allocated: large fresh outputs cost page faults that would hide the kernel's
/// bandwidth, so the benchmarks time this form.
void layer_norm_into(const Tensor2& x, const Tensor1& gamma, const Tensor1& beta, double eps, Tensor2& y);
/// @ingroup ch01
/// dx row by row in parallel; dgamma/dbeta as per-thread partial sums, added at the end.
LayerNormGrads layer_norm_backward(const Tensor2& x, const Tensor1& gamma, const Tensor2& dy, double eps = 1e-5);
/// @ingroup ch01
/// One SIMD pass for \f$ \sum x^2 \f$, one for \f$ \gamma x / r \f$: no mean, so one pass less than LayerNorm.
Tensor2 rms_norm(const Tensor2& x, const Tensor1& gamma, double eps = 1e-6);
/// @ingroup ch01
/// As `rms_norm`, writing into `y` (see `layer_norm_into`).
void rms_norm_into(const Tensor2& x, const Tensor1& gamma, double eps, Tensor2& y);
/// @ingroup ch01
RmsNormGrads rms_norm_backward(const Tensor2& x, const Tensor1& gamma, const Tensor2& dy, double eps = 1e-6);

}  // namespace tvlab::opt
