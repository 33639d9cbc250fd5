// Built when nvcc is not found: the device entry points of cuda/src/activations.cu, each throwing
// "built without CUDA", so every program links and the CUDA test cases skip.

#include "no_cuda.hpp"
#include "tvlab/cuda/activations_device.hpp"

namespace tvlab::cuda {
namespace device {
void activation_inplace(Activation, float*, std::size_t) { no_cuda("activation_inplace"); }
void bias_activation_inplace(Activation, float*, const float*, std::size_t, std::size_t) { no_cuda("bias_activation_inplace"); }
}  // namespace device
}  // namespace tvlab::cuda
