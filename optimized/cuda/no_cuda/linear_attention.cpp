// Built when nvcc is not found: the device entry points of cuda/src/linear_attention.cu, each
// throwing "built without CUDA", so every program links and the CUDA test cases skip.

#include "no_cuda.hpp"
#include "tvlab/cuda/linear_attention_device.hpp"

namespace tvlab::cuda::device {
std::size_t linear_attention_shared_bytes(std::size_t, std::size_t) { no_cuda("linear_attention_shared_bytes"); }
void causal_linear_attention(const LinearAttentionArgs&) { no_cuda("causal_linear_attention"); }
}  // namespace tvlab::cuda::device
