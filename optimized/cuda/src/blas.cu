// cuBLAS behind blas.hpp: one handle per process, and the row-major products expressed in
// cuBLAS's column-major convention.

#include <cublas_v2.h>

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

// One cuBLAS handle per process, created on first use.
cublasHandle_t cublas_handle() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    TVLAB_CUBLAS_CHECK(cublasCreate(&h));
    // Plain FP32 (no TF32 tensor cores), so results stay within the float tolerance of the reference.
    TVLAB_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
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
  TVLAB_CUBLAS_CHECK(cublasSgemm(cublas_handle(), g.op_b, CUBLAS_OP_N, g.rows, g.cols, g.inner, &one, b, g.ld_b, a,
                                 g.ld_a, &beta, c, g.ld_c));
}

void sgemm_strided_batched(std::size_t batch, std::size_t m, std::size_t n, std::size_t k, float alpha,
                           const float* a, std::size_t stride_a, const float* b, std::size_t stride_b,
                           bool transpose_b, float* c, std::size_t stride_c, float beta) {
  const ColumnMajor g = column_major(m, n, k, transpose_b);
  TVLAB_CUBLAS_CHECK(cublasSgemmStridedBatched(
      cublas_handle(), g.op_b, CUBLAS_OP_N, g.rows, g.cols, g.inner, &alpha, b, g.ld_b,
      static_cast<long long>(stride_b), a, g.ld_a, static_cast<long long>(stride_a), &beta, c, g.ld_c,
      static_cast<long long>(stride_c), static_cast<int>(batch)));
}

}  // namespace tvlab::cuda::device
