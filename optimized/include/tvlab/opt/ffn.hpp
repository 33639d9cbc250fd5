#pragma once
/// @file
/// Feed-forward networks on OpenBLAS SGEMM with fused epilogues (chapter 01).
/// Must match `tvlab::ref::ffn_relu`, `ref::ffn_gelu`, `ref::ffn_swiglu`.

#include "tvlab/core/ffn_types.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// @ingroup ch01
/// \f$ H = xW_1 \f$ (SGEMM), bias + ReLU fused into one pass over H, \f$ Y = HW_2 \f$ (SGEMM) with b2
/// preloaded into Y so the second SGEMM adds onto it (beta = 1).
Tensor2 ffn_relu(const Tensor2& x, const FfnWeights& w);
/// @ingroup ch01
Tensor2 ffn_gelu(const Tensor2& x, const FfnWeights& w);
/// @ingroup ch01
/// Two SGEMMs for gate and up, one fused pass \f$ h = \mathrm{SiLU}(g)\odot u \f$ in place, one SGEMM for W3.
Tensor2 ffn_swiglu(const Tensor2& x, const SwigluWeights& w);

}  // namespace tvlab::opt
