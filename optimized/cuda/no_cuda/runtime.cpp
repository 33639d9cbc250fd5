// Built when nvcc is not found: the device entry points of cuda/src/runtime.cu, each throwing
// "built without CUDA", so every program links and the CUDA test cases skip.

#include "no_cuda.hpp"
#include "tvlab/cuda/runtime.hpp"

namespace tvlab::cuda {
bool device_available() { return false; }
std::string device_description() { return "built without CUDA"; }

namespace device {
int compute_capability() { no_cuda("compute_capability"); }
std::size_t max_shared_bytes_per_block() { no_cuda("max_shared_bytes_per_block"); }
void* malloc_bytes(std::size_t) { no_cuda("malloc_bytes"); }
void free_bytes(void*) noexcept {}
void copy_to_device(void*, const void*, std::size_t) { no_cuda("copy_to_device"); }
void copy_to_host(void*, const void*, std::size_t) { no_cuda("copy_to_host"); }
void fill_bytes(void*, int, std::size_t) { no_cuda("fill_bytes"); }
void synchronize() { no_cuda("synchronize"); }
double time_kernel_ms(void (*)(void*), void*, int) { no_cuda("time_kernel_ms"); }
}  // namespace device
}  // namespace tvlab::cuda
