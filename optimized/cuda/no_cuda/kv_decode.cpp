// Built when nvcc is not found: the device entry point of cuda/src/kv_decode.cu, throwing "built
// without CUDA", so every program links and the CUDA test cases skip. The shared-memory formula is
// inline in kv_decode_device.hpp, the same here as for the launch.

#include "no_cuda.hpp"
#include "tvlab/cuda/kv_decode_device.hpp"

namespace tvlab::cuda {
namespace device {
void decode_attention(const DecodeArgs&) { no_cuda("decode_attention"); }
}  // namespace device
}  // namespace tvlab::cuda
