// Built when nvcc is not found: the device entry points of cuda/src/rope.cu, each throwing
// "built without CUDA", so every program links and the CUDA test cases skip.

#include "no_cuda.hpp"
#include "tvlab/cuda/rope_device.hpp"

namespace tvlab::cuda {
namespace device {
void apply_rope_inplace(float*, std::size_t, std::size_t, std::size_t, std::size_t, const float*, const float*, bool) {
  no_cuda("apply_rope_inplace");
}
}  // namespace device
}  // namespace tvlab::cuda
