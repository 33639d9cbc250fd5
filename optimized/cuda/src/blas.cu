// cuBLAS behind blas.hpp: one handle per process, and the row-major products expressed in
// cuBLAS's column-major convention.
//
// cuBLAS is opened with dlopen on first use instead of being linked: libcublas pulls in
// libcublasLt (over 500 MB), and mapping and relocating it costs every tvlab process about
// 0.1 s at start, although most runs (and every run on a machine without a GPU) never call it.

#include <cublas_v2.h>
#include <dlfcn.h>

#include "check.cuh"
#include "tvlab/cuda/blas.hpp"

#define TVLAB_CUBLAS_CHECK(call)                                                                        \
  do {                                                                                                  \
    const cublasStatus_t tvlab_status = (call);                                                         \
    if (tvlab_status != CUBLAS_STATUS_SUCCESS)                                                          \
      throw std::runtime_error(std::string("cuBLAS error ") + std::to_string(static_cast<int>(tvlab_status)) + \
                               " in " + #call + " at " + __FILE__ + ":" + std::to_string(__LINE__));    \
  } while (0)

namespace tvlab::cuda::device {
namespace {

// The four cuBLAS entry points tvlab calls, looked up by their exported names (cublas_v2.h maps
// cublasCreate and cublasSgemm to the "_v2" symbols).
struct CublasApi {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasSetMathMode) set_math_mode;
  decltype(&cublasSgemm_v2) sgemm;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched;
};

template <class Function>
Function cublas_symbol(void* library, const char* name) {
  void* symbol = dlsym(library, name);
  if (symbol == nullptr) throw std::runtime_error(std::string("cuBLAS has no symbol ") + name);
  return reinterpret_cast<Function>(symbol);
}

// The library the build found (TVLAB_CUBLAS_PATH), else its soname on the loader's search path.
const CublasApi& cublas() {
  static const CublasApi api = [] {
    void* library = dlopen(TVLAB_CUBLAS_PATH, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) library = dlopen(TVLAB_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr)
      throw std::runtime_error(std::string("cannot load cuBLAS (" TVLAB_CUBLAS_SONAME "): ") + dlerror());
    return CublasApi{cublas_symbol<decltype(CublasApi::create)>(library, "cublasCreate_v2"),
                     cublas_symbol<decltype(CublasApi::set_math_mode)>(library, "cublasSetMathMode"),
                     cublas_symbol<decltype(CublasApi::sgemm)>(library, "cublasSgemm_v2"),
                     cublas_symbol<decltype(CublasApi::sgemm_strided_batched)>(library, "cublasSgemmStridedBatched")};
  }();
  return api;
}

// One cuBLAS handle per process, created on first use.
cublasHandle_t cublas_handle() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    TVLAB_CUBLAS_CHECK(cublas().create(&h));
    // Plain FP32 (no TF32 tensor cores), so results stay within the float tolerance of the reference.
    TVLAB_CUBLAS_CHECK(cublas().set_math_mode(h, CUBLAS_DEFAULT_MATH));
    return h;
  }();
  return handle;
}

// Row-major C[m, n] = A[m, k] op(B): cuBLAS is column-major, and a row-major matrix is its
// transpose in column-major, so cuBLAS computes C^T [n, m] = op(B)^T A^T, B first.
struct ColumnMajor {
  cublasOperation_t op_b;
  int rows, cols, inner;  // of C^T, and the shared dimension: n, m, k
  int ld_b, ld_a, ld_c;
};

ColumnMajor column_major(std::size_t m, std::size_t n, std::size_t k, bool transpose_b) {
  return {transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
          static_cast<int>(n),
          static_cast<int>(m),
          static_cast<int>(k),
          static_cast<int>(transpose_b ? k : n),
          static_cast<int>(k),
          static_cast<int>(n)};
}

}  // namespace

void sgemm(std::size_t m, std::size_t n, std::size_t k, const float* a, const float* b, bool transpose_b, float* c,
           float beta) {
  const ColumnMajor g = column_major(m, n, k, transpose_b);
  const float one = 1.0f;
  TVLAB_CUBLAS_CHECK(cublas().sgemm(cublas_handle(), g.op_b, CUBLAS_OP_N, g.rows, g.cols, g.inner, &one, b, g.ld_b, a,
                                 g.ld_a, &beta, c, g.ld_c));
}

void sgemm_strided_batched(std::size_t batch, std::size_t m, std::size_t n, std::size_t k, float alpha,
                           const float* a, std::size_t stride_a, const float* b, std::size_t stride_b,
                           bool transpose_b, float* c, std::size_t stride_c, float beta) {
  const ColumnMajor g = column_major(m, n, k, transpose_b);
  TVLAB_CUBLAS_CHECK(cublas().sgemm_strided_batched(
      cublas_handle(), g.op_b, CUBLAS_OP_N, g.rows, g.cols, g.inner, &alpha, b, g.ld_b,
      static_cast<long long>(stride_b), a, g.ld_a, static_cast<long long>(stride_a), &beta, c, g.ld_c,
      static_cast<long long>(stride_c), static_cast<int>(batch)));
}

}  // namespace tvlab::cuda::device
