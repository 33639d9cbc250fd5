// Host-tensor entry point of the CUDA softmax: validate, upload, call the device entry point of
// softmax_device.hpp, download. Compiled with or without nvcc.

#include "tvlab/core/error.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "tvlab/cuda/softmax.hpp"
#include "tvlab/cuda/softmax_device.hpp"

namespace tvlab::cuda {

Tensor2 softmax(const Tensor2& x) {
  require_nonempty("softmax", "x", x);
  require_finite_or_neg_inf("softmax", "x", x);
  Tensor2 y = x;
  DeviceBuffer<float> buffer(y.data(), y.size());
  device::softmax_rows(buffer.get(), y.shape()[0], y.shape()[1]);
  buffer.download(y.data());
  return y;
}

}  // namespace tvlab::cuda
