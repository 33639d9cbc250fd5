#include "tvlab/ref/ffn.hpp"

#include <cmath>
#include <numbers>

namespace tvlab::ref {
namespace {

// h = f(x W1 + b1) in double, then y = h W2 + b2. `f` is the activation.
template <class F>
Tensor2 two_layer_ffn(const Tensor2& x, const FfnWeights& w, std::size_t d_ff, F f) {
  const std::size_t tokens = x.shape()[0], d_model = x.shape()[1];
  Tensor2 y = Tensor2::from_shape({tokens, d_model});
  DTensor1 h = DTensor1::from_shape({d_ff});
  for (std::size_t t = 0; t < tokens; ++t) {
    // h_f = f(sum_c x_c W1[c, f] + b1_f)
    for (std::size_t j = 0; j < d_ff; ++j) {
      double acc = w.b1.size() ? static_cast<double>(w.b1(j)) : 0.0;
      for (std::size_t c = 0; c < d_model; ++c) acc += static_cast<double>(x(t, c)) * w.w1(c, j);
      h(j) = f(acc);
    }
    // y_c = sum_f h_f W2[f, c] + b2_c
    for (std::size_t c = 0; c < d_model; ++c) {
      double acc = w.b2.size() ? static_cast<double>(w.b2(c)) : 0.0;
      for (std::size_t j = 0; j < d_ff; ++j) acc += h(j) * w.w2(j, c);
      y(t, c) = static_cast<float>(acc);
    }
  }
  return y;
}

}  // namespace

Tensor2 ffn_relu(const Tensor2& x, const FfnWeights& w) {
  const std::size_t d_ff = validate_ffn("ffn_relu", x, w);
  return two_layer_ffn(x, w, d_ff, [](double v) { return v > 0.0 ? v : 0.0; });
}

Tensor2 ffn_gelu(const Tensor2& x, const FfnWeights& w) {
  const std::size_t d_ff = validate_ffn("ffn_gelu", x, w);
  return two_layer_ffn(x, w, d_ff, [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::numbers::sqrt2)); });
}

Tensor2 ffn_swiglu(const Tensor2& x, const SwigluWeights& w) {
  const std::size_t d_ff = validate_swiglu("ffn_swiglu", x, w);
  const std::size_t tokens = x.shape()[0], d_model = x.shape()[1];
  Tensor2 y = Tensor2::from_shape({tokens, d_model});
  DTensor1 h = DTensor1::from_shape({d_ff});
  for (std::size_t t = 0; t < tokens; ++t) {
    // h_f = Swish(x W1)_f * (x W2)_f,  Swish(a) = a / (1 + e^-a)
    for (std::size_t j = 0; j < d_ff; ++j) {
      double gate = 0.0, up = 0.0;
      for (std::size_t c = 0; c < d_model; ++c) {
        gate += static_cast<double>(x(t, c)) * w.w1(c, j);
        up += static_cast<double>(x(t, c)) * w.w2(c, j);
      }
      h(j) = gate / (1.0 + std::exp(-gate)) * up;
    }
    // y_c = sum_f h_f W3[f, c]
    for (std::size_t c = 0; c < d_model; ++c) {
      double acc = 0.0;
      for (std::size_t j = 0; j < d_ff; ++j) acc += h(j) * w.w3(j, c);
      y(t, c) = static_cast<float>(acc);
    }
  }
  return y;
}

}  // namespace tvlab::ref
