#pragma once
/// @file
/// Exercises 01.1 and 01.2: your RMSNorm forward and backward. Same contracts as
/// `tvlab::ref::rms_norm` and `tvlab::ref::rms_norm_backward`.

#include "tvlab/core/norm_types.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::student {

/// @ingroup ch01
Tensor2 rms_norm(const Tensor2& x, const Tensor1& gamma, double eps = 1e-6);
/// @ingroup ch01
RmsNormGrads rms_norm_backward(const Tensor2& x, const Tensor1& gamma, const Tensor2& dy, double eps = 1e-6);

}  // namespace tvlab::student
