// Built when nvcc is not found: the device entry point of cuda/src/flash_attention_tensor_core.cu,
// throwing "built without CUDA", so every program links and the CUDA test cases skip.

#include "no_cuda.hpp"
#include "tvlab/cuda/flash_attention_device.hpp"

namespace tvlab::cuda {
namespace device {
void flash_forward_tensor_core(const FlashTensorCoreArgs&) { no_cuda("flash_forward_tensor_core"); }
}  // namespace device
}  // namespace tvlab::cuda
