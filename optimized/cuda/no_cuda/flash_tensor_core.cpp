// Built when nvcc is not found: the device entry points of cuda/src/flash_tensor_core.cu, each throwing
// "built without CUDA", so every program links and the CUDA test cases skip.

#include "no_cuda.hpp"
#include "tvlab/cuda/flash_device.hpp"

namespace tvlab::cuda {
namespace device {
void flash_forward_tensor_core(const FlashTensorCoreArgs&) { no_cuda("flash_forward_tensor_core"); }
std::size_t flash_tensor_core_shared_bytes(const FlashTensorCoreArgs&) { no_cuda("flash_tensor_core_shared_bytes"); }
int compute_capability() { no_cuda("compute_capability"); }
}  // namespace device
}  // namespace tvlab::cuda
