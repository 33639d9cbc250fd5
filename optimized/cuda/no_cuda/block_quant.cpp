// Built when nvcc is not found: the device entry points of cuda/src/block_quant.cu, each throwing
// "built without CUDA", so every program links and the CUDA test cases skip.

#include "no_cuda.hpp"
#include "tvlab/cuda/block_quant_device.hpp"

namespace tvlab::cuda {
namespace device {
void dequantize_blocks(std::uint32_t, const std::uint8_t*, std::size_t, std::size_t, float*) {
  no_cuda("dequantize_blocks");
}
void quantized_gemv(std::uint32_t, const std::uint8_t*, std::size_t, std::size_t, const std::uint8_t*, float*) {
  no_cuda("quantized_gemv");
}
void fp8_encode(const float*, std::size_t, bool, bool, std::uint8_t*) { no_cuda("fp8_encode"); }
}  // namespace device
}  // namespace tvlab::cuda
