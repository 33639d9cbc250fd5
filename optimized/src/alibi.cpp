#include "tvlab/opt/alibi.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tvlab::opt {

Tensor3 alibi_bias(int num_heads, long long seq_q, long long seq_k, AlibiMode mode) {
  validate_alibi("alibi_bias", num_heads, seq_q, seq_k, mode);
  const DTensor1 m = alibi_slopes(num_heads);
  const auto heads = static_cast<std::size_t>(num_heads), nq = static_cast<std::size_t>(seq_q),
             nk = static_cast<std::size_t>(seq_k);
  Tensor3 bias = Tensor3::from_shape({heads, nq, nk});
  const auto rows = static_cast<std::ptrdiff_t>(heads * nq);
#pragma omp parallel for schedule(static) if (rows * static_cast<std::ptrdiff_t>(nk) > 65536)
  for (std::ptrdiff_t r = 0; r < rows; ++r) {
    const std::size_t h = static_cast<std::size_t>(r) / nq, i = static_cast<std::size_t>(r) % nq;
    const auto slope = static_cast<float>(m(h));
    // i' = i + seq_k - seq_q, negative for early queries when seq_q > seq_k (symmetric mode only).
    const long long query_position = static_cast<long long>(i) + seq_k - seq_q;
    float* row = bias.data() + static_cast<std::size_t>(r) * nk;
    // Keys up to i': -m (i' - j), exact in float for |i' - j| < 2^24; beyond: -inf or -m (j - i').
    const auto visible = static_cast<std::size_t>(std::clamp(query_position + 1, 0LL, seq_k));
#pragma omp simd
    for (std::size_t j = 0; j < visible; ++j) row[j] = 0.0f - slope * static_cast<float>(query_position - static_cast<long long>(j));
    const float neg_inf = -std::numeric_limits<float>::infinity();
    for (std::size_t j = visible; j < nk; ++j)
      row[j] = mode == AlibiMode::causal ? neg_inf : -slope * static_cast<float>(static_cast<long long>(j) - query_position);
  }
  return bias;
}

}  // namespace tvlab::opt
