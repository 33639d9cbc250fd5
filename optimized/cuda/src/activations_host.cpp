// Host-tensor entry points of the CUDA activations: validate, upload, launch, download.
// Compiled with or without nvcc.

#include "tvlab/core/error.hpp"
#include "tvlab/cuda/activations.hpp"
#include "tvlab/cuda/activations_device.hpp"
#include "tvlab/cuda/runtime.hpp"

namespace tvlab::cuda {
namespace {

Tensor2 activation(const char* fn, device::Activation f, const Tensor2& x) {
  require_finite(fn, "x", x);
  Tensor2 y = x;
  DeviceBuffer<float> buffer(y.data(), y.size());
  device::activation_inplace(f, buffer.get(), y.size());
  buffer.download(y.data());
  return y;
}

}  // namespace

Tensor2 relu(const Tensor2& x) { return activation("relu", device::Activation::relu, x); }
Tensor2 gelu(const Tensor2& x) { return activation("gelu", device::Activation::gelu, x); }
Tensor2 gelu_tanh(const Tensor2& x) { return activation("gelu_tanh", device::Activation::gelu_tanh, x); }
Tensor2 silu(const Tensor2& x) { return activation("silu", device::Activation::silu, x); }

}  // namespace tvlab::cuda
