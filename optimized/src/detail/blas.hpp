#pragma once
// Internal helpers around OpenBLAS used by the optimized CPU code.

#include <cblas.h>

#include <cstddef>

namespace tvlab::opt::detail {

/// C[m, n] = alpha * A[m, k] * B[k, n] + beta * C, all row-major, B optionally transposed
/// (then B is stored [n, k]). Leading dimensions are the row lengths in memory. One row (m = 1, a
/// decode step's projection) goes to SGEMV: SGEMM would first copy all of B into its packed
/// layout, a second pass over the weights for one use of each.
inline void sgemm(std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a, std::size_t lda,
                  const float* b, std::size_t ldb, bool transpose_b, float beta, float* c, std::size_t ldc) {
  if (m == 1) {
    // c = alpha B^T a (B [k, n]) or alpha B a (B stored [n, k]), + beta c
    if (transpose_b)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(n), static_cast<int>(k), alpha, b,
                  static_cast<int>(ldb), a, 1, beta, c, 1);
    else
      cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<int>(k), static_cast<int>(n), alpha, b, static_cast<int>(ldb),
                  a, 1, beta, c, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
              beta, c, static_cast<int>(ldc));
}

/// While alive, OpenBLAS runs single-threaded: used around OpenMP regions that call SGEMM
/// from several threads, so the two thread pools do not oversubscribe the cores.
class SingleThreadedBlas {
 public:
  SingleThreadedBlas() : saved_(openblas_get_num_threads()) { openblas_set_num_threads(1); }
  ~SingleThreadedBlas() { openblas_set_num_threads(saved_); }
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

 private:
  int saved_;
};

}  // namespace tvlab::opt::detail
