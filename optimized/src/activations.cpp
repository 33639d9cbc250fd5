#include "tvlab/opt/activations.hpp"

#include <cmath>
#include <numbers>

#include "tvlab/core/error.hpp"

namespace tvlab::opt {

// Float forms of the reference formulas. erff/tanhf/expf are float libm calls; the loops
// below are simple enough for the compiler to vectorise where libmvec has the function.
float gelu_scalar(float v) { return 0.5f * v * (1.0f + std::erf(v * static_cast<float>(1.0 / std::numbers::sqrt2))); }

float gelu_tanh_scalar(float v) {
  constexpr float sqrt_2_over_pi = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * v * (1.0f + std::tanh(sqrt_2_over_pi * (v + 0.044715f * v * v * v)));
}

// For v << 0, exp(-v) overflows to inf and v / inf = -0: the right limit, no NaN.
float silu_scalar(float v) { return v / (1.0f + std::exp(-v)); }

namespace {

template <class F>
Tensor2 elementwise(const char* fn, const Tensor2& x, F f) {
  require_finite(fn, "x", x);
  Tensor2 y = Tensor2::from_shape({x.shape()[0], x.shape()[1]});
  const float* in = x.data();
  float* out = y.data();
  const auto n = static_cast<std::ptrdiff_t>(x.size());
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (std::ptrdiff_t i = 0; i < n; ++i) out[i] = f(in[i]);
  return y;
}

}  // namespace

Tensor2 relu(const Tensor2& x) { return elementwise("relu", x, relu_scalar); }
Tensor2 gelu(const Tensor2& x) { return elementwise("gelu", x, gelu_scalar); }
Tensor2 gelu_tanh(const Tensor2& x) { return elementwise("gelu_tanh", x, gelu_tanh_scalar); }
Tensor2 silu(const Tensor2& x) { return elementwise("silu", x, silu_scalar); }

}  // namespace tvlab::opt
