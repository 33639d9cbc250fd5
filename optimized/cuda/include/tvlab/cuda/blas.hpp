#pragma once
/// @file
/// Dense matrix products on the device through cuBLAS, row-major like the rest of tvlab: the
/// projections of chapters 00 and 01, and the two batched products around chapter 00's masked
/// softmax. Device pointers; no xtensor and no CUDA headers. Plain FP32 (no TF32 tensor cores),
/// so results stay within the float tolerance of the reference. Without nvcc the same functions
/// come from `cuda/no_cuda/blas.cpp` and throw "built without CUDA".

#include <cstddef>

namespace tvlab::cuda::device {

/// Row-major C[m, n] = A[m, k] op(B) (+ beta C) with cuBLAS; op(B) = B `[k, n]` or, when
/// `transpose_b`, B stored `[n, k]`.
void sgemm(std::size_t m, std::size_t n, std::size_t k, const float* a, const float* b, bool transpose_b,
           float* c, float beta = 0.0f);

/// `batch` products C_i = alpha A_i op(B_i) (+ beta C_i), each as `sgemm`, with matrix i of A, B
/// and C starting `i * stride_a`, `i * stride_b` and `i * stride_c` floats after the first.
void sgemm_strided_batched(std::size_t batch, std::size_t m, std::size_t n, std::size_t k, float alpha,
                           const float* a, std::size_t stride_a, const float* b, std::size_t stride_b,
                           bool transpose_b, float* c, std::size_t stride_c, float beta = 0.0f);

}  // namespace tvlab::cuda::device
