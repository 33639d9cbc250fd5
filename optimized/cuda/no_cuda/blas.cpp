// Built when nvcc is not found: the device entry points of cuda/src/blas.cu, each throwing
// "built without CUDA", so every program links and the CUDA test cases skip.

#include "no_cuda.hpp"
#include "tvlab/cuda/blas.hpp"

namespace tvlab::cuda {
namespace device {
void sgemm(std::size_t, std::size_t, std::size_t, const float*, const float*, bool, float*, float) { no_cuda("sgemm"); }
void sgemm_strided_batched(std::size_t, std::size_t, std::size_t, std::size_t, float, const float*, std::size_t,
                           const float*, std::size_t, bool, float*, std::size_t, float) {
  no_cuda("sgemm_strided_batched");
}
}  // namespace device
}  // namespace tvlab::cuda
