// Built when nvcc is not found: the device entry points of cuda/src/moe.cu, each throwing
// "built without CUDA", so every program links and the CUDA test cases skip.

#include "no_cuda.hpp"
#include "tvlab/cuda/moe_device.hpp"

namespace tvlab::cuda {
namespace device {
void gather_rows(const float*, const std::int32_t*, std::size_t, std::size_t, float*) { no_cuda("gather_rows"); }
void combine_rows(const float*, const std::int32_t*, const std::int32_t*, const float*, std::size_t, std::size_t, float*) {
  no_cuda("combine_rows");
}
void route_top_k(const float*, std::size_t, std::size_t, std::size_t, bool, bool, float, float, std::size_t, std::size_t, float,
                 const float*, std::int32_t*, float*) {
  no_cuda("route_top_k");
}
}  // namespace device
}  // namespace tvlab::cuda
