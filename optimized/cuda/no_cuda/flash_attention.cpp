// Built when nvcc is not found: the device entry points of cuda/src/flash_attention.cu, each throwing
// "built without CUDA", so every program links and the CUDA test cases skip.

#include "no_cuda.hpp"
#include "tvlab/cuda/flash_device.hpp"

namespace tvlab::cuda {
namespace device {
void flash_forward_rowwise(const FlashArgs&) { no_cuda("flash_forward_rowwise"); }
void flash_forward_tiled(const FlashArgs&) { no_cuda("flash_forward_tiled"); }
void flash_backward(const FlashBackwardArgs&) { no_cuda("flash_backward"); }
std::size_t flash_tiled_shared_bytes(const FlashArgs& a) { return a.block_k * (a.head_dim + a.head_dim_v) * sizeof(float); }
std::size_t max_shared_bytes_per_block() { no_cuda("max_shared_bytes_per_block"); }
}  // namespace device
}  // namespace tvlab::cuda
