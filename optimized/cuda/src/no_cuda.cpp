// Built when nvcc is not found: the same device entry points as the .cu files, each throwing
// "built without CUDA", so every program links and the CUDA test cases skip.

#include <stdexcept>

#include "tvlab/cuda/attention_device.hpp"
#include "tvlab/cuda/ffn_device.hpp"
#include "tvlab/cuda/flash_device.hpp"
#include "tvlab/cuda/norm_device.hpp"
#include "tvlab/cuda/rope_device.hpp"
#include "tvlab/cuda/runtime.hpp"

namespace tvlab::cuda {
namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw std::runtime_error(std::string(what) + ": tvlab was built without CUDA (nvcc was not found at configure time)");
}
}  // namespace

bool device_available() { return false; }
std::string device_description() { return "built without CUDA"; }

namespace device {
void* malloc_bytes(std::size_t) { no_cuda("malloc_bytes"); }
void free_bytes(void*) noexcept {}
void copy_to_device(void*, const void*, std::size_t) { no_cuda("copy_to_device"); }
void copy_to_host(void*, const void*, std::size_t) { no_cuda("copy_to_host"); }
void fill_bytes(void*, int, std::size_t) { no_cuda("fill_bytes"); }
void synchronize() { no_cuda("synchronize"); }
double time_kernel_ms(void (*)(void*), void*, int) { no_cuda("time_kernel_ms"); }

void softmax_rows(float*, std::size_t, std::size_t) { no_cuda("softmax_rows"); }
void scaled_dot_product_attention(const AttentionArgs&) { no_cuda("scaled_dot_product_attention"); }
void sgemm(std::size_t, std::size_t, std::size_t, const float*, const float*, bool, float*, float) { no_cuda("sgemm"); }

void layer_norm_forward(const NormArgs&) { no_cuda("layer_norm_forward"); }
void rms_norm_forward(const NormArgs&) { no_cuda("rms_norm_forward"); }
void layer_norm_backward(const NormBackwardArgs&) { no_cuda("layer_norm_backward"); }
void rms_norm_backward(const NormBackwardArgs&) { no_cuda("rms_norm_backward"); }
void activation_inplace(Activation, float*, std::size_t) { no_cuda("activation_inplace"); }
void bias_activation_inplace(Activation, float*, const float*, std::size_t, std::size_t) { no_cuda("bias_activation_inplace"); }
void swiglu_combine(const float*, const float*, float*, std::size_t) { no_cuda("swiglu_combine"); }
void apply_rope_inplace(float*, std::size_t, std::size_t, std::size_t, const float*, const float*, bool) {
  no_cuda("apply_rope_inplace");
}
void flash_forward_rowwise(const FlashArgs&) { no_cuda("flash_forward_rowwise"); }
void flash_forward_tiled(const FlashArgs&) { no_cuda("flash_forward_tiled"); }
void flash_backward(const FlashBackwardArgs&) { no_cuda("flash_backward"); }
void flash_forward_tensor_core(const FlashTensorCoreArgs&) { no_cuda("flash_forward_tensor_core"); }
std::size_t flash_tensor_core_shared_bytes(const FlashTensorCoreArgs&) { no_cuda("flash_tensor_core_shared_bytes"); }
int compute_capability() { no_cuda("compute_capability"); }
std::size_t flash_tiled_shared_bytes(const FlashArgs& a) { return a.block_k * (a.head_dim + a.head_dim_v) * sizeof(float); }
std::size_t max_shared_bytes_per_block() { no_cuda("max_shared_bytes_per_block"); }
}  // namespace device
}  // namespace tvlab::cuda
