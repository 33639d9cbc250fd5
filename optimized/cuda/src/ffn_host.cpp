// Host-tensor entry points of the CUDA FFNs: validate, upload, launch, download. Compiled with or
// without nvcc.

#include "tvlab/core/error.hpp"
#include "tvlab/cuda/activations_device.hpp"
#include "tvlab/cuda/blas.hpp"
#include "tvlab/cuda/ffn.hpp"
#include "tvlab/cuda/ffn_device.hpp"
#include "tvlab/cuda/runtime.hpp"

namespace tvlab::cuda {
namespace {

// H = f(x W1 + b1) (cuBLAS + fused epilogue kernel), Y = H W2 (+ b2 preloaded, beta = 1).
Tensor2 two_layer_ffn(device::Activation f, const Tensor2& x, const FfnWeights& w, std::size_t d_ff) {
  const std::size_t tokens = x.shape()[0], d_model = x.shape()[1];
  DeviceBuffer<float> dx(x.data(), x.size()), w1(w.w1.data(), w.w1.size()), w2(w.w2.data(), w.w2.size());
  DeviceBuffer<float> h(tokens * d_ff), b1;
  if (w.b1.size()) b1 = DeviceBuffer<float>(w.b1.data(), w.b1.size());
  device::sgemm(tokens, d_ff, d_model, dx.get(), w1.get(), false, h.get());
  device::bias_activation_inplace(f, h.get(), b1.get(), tokens, d_ff);
  Tensor2 y = Tensor2::from_shape({tokens, d_model});
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t c = 0; c < d_model; ++c) y(t, c) = w.b2.size() ? w.b2(c) : 0.0f;
  DeviceBuffer<float> dy(y.data(), y.size());
  device::sgemm(tokens, d_model, d_ff, h.get(), w2.get(), false, dy.get(), 1.0f);
  dy.download(y.data());
  return y;
}

}  // namespace

Tensor2 ffn_relu(const Tensor2& x, const FfnWeights& w) {
  return two_layer_ffn(device::Activation::relu, x, w, validate_ffn("ffn_relu", x, w));
}

Tensor2 ffn_gelu(const Tensor2& x, const FfnWeights& w) {
  return two_layer_ffn(device::Activation::gelu, x, w, validate_ffn("ffn_gelu", x, w));
}

Tensor2 ffn_swiglu(const Tensor2& x, const SwigluWeights& w) {
  const std::size_t d_ff = validate_swiglu("ffn_swiglu", x, w);
  const std::size_t tokens = x.shape()[0], d_model = x.shape()[1];
  DeviceBuffer<float> dx(x.data(), x.size()), w1(w.w1.data(), w.w1.size()), w2(w.w2.data(), w.w2.size()),
      w3(w.w3.data(), w.w3.size());
  DeviceBuffer<float> gate(tokens * d_ff), up(tokens * d_ff), dy(tokens * d_model);
  device::sgemm(tokens, d_ff, d_model, dx.get(), w1.get(), false, gate.get());
  device::sgemm(tokens, d_ff, d_model, dx.get(), w2.get(), false, up.get());
  device::swiglu_combine(gate.get(), up.get(), gate.get(), tokens * d_ff);
  device::sgemm(tokens, d_model, d_ff, gate.get(), w3.get(), false, dy.get());
  Tensor2 y = Tensor2::from_shape({tokens, d_model});
  dy.download(y.data());
  return y;
}

}  // namespace tvlab::cuda
