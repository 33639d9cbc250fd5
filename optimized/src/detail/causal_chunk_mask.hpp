#pragma once
// The causal mask inside a chunk of linear attention, shared by the optimized linear attention
// and Performer: a chunk's scores A = phi(Q_c) phi(K_c)^T as the SGEMM wrote them, every entry.

#include <algorithm>
#include <cstddef>

namespace tvlab::opt::detail {

/// Zeroes A_ij for j > i (a query does not see the chunk's later keys) in the `rows` x `rows`
/// row-major A, and adds each row's remaining sum \f$ \sum_{j \le i} A_{ij} \f$ to `denominators[i]`
/// (the intra-chunk part of the normaliser).
inline void mask_causal_and_add_row_sums(float* a, std::size_t rows, float* denominators) {
  for (std::size_t i = 0; i < rows; ++i) {
    float* a_row = a + i * rows;
    std::fill(a_row + i + 1, a_row + rows, 0.0f);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (std::size_t j = 0; j <= i; ++j) sum += a_row[j];
    denominators[i] += sum;
  }
}

}  // namespace tvlab::opt::detail
