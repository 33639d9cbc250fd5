#pragma once
// Double-precision oracles for chapter 01, written independently of tvlab::ref.

#include <functional>

#include "tvlab/core/ffn_types.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ch01 {

/// Forward in double: LayerNorm when `beta` is given, else RMSNorm.
DTensor2 norm_oracle(const DTensor2& x, const DTensor1& gamma, const DTensor1* beta, double eps);
DTensor2 to_double(const Tensor2& t);
DTensor1 to_double(const Tensor1& t);

/// Gradients of L = sum(dy * norm(x)) by central differences of `norm_oracle` in double:
/// dL/dx, dL/dgamma (and dL/dbeta for LayerNorm).
struct NumericGrads {
  DTensor2 dx;
  DTensor1 dgamma, dbeta;
};
NumericGrads norm_finite_differences(const Tensor2& x, const Tensor1& gamma, const Tensor1* beta, const Tensor2& dy,
                                     double eps);

/// Elementwise activation in double.
DTensor2 activation_oracle(const Tensor2& x, const std::function<double(double)>& f);
double gelu_exact(double x);
double gelu_tanh_formula(double x);
double silu_formula(double x);

DTensor2 ffn_oracle(const Tensor2& x, const FfnWeights& w, const std::function<double(double)>& f);
DTensor2 swiglu_oracle(const Tensor2& x, const SwigluWeights& w);

}  // namespace tvlab::ch01
