#include "tvlab/ref/alibi.hpp"

#include <cmath>
#include <limits>

#include "tvlab/core/error.hpp"

namespace tvlab::ref {
namespace {

// m_h = start^(h+1) with start = 2^(-8/n), for n a power of two; computed as 2^(-8(h+1)/n),
// exact whenever 8(h+1)/n is an integer (the authors' start^(h+1) rounds in the last bit).
void power_of_two_slopes(int n, std::vector<double>& out) {
  for (int h = 0; h < n; ++h) out.push_back(std::exp2(-8.0 * (h + 1) / n));
}

}  // namespace

DTensor1 alibi_slopes(int num_heads) {
  require_positive("alibi_slopes", "num_heads", num_heads);
  std::vector<double> slopes;
  int p = 1;
  while (p <= num_heads / 2) p *= 2;  // largest power of two <= num_heads (no overflow)
  power_of_two_slopes(p, slopes);
  if (p < num_heads) {
    // The remaining n - p heads take slopes 0, 2, 4, ... of the 2p-head series: they fall
    // between the ones already used.
    std::vector<double> doubled;
    power_of_two_slopes(2 * p, doubled);
    for (int k = 0; k < num_heads - p; ++k) slopes.push_back(doubled[static_cast<std::size_t>(2 * k)]);
  }
  DTensor1 out = DTensor1::from_shape({slopes.size()});
  for (std::size_t h = 0; h < slopes.size(); ++h) out(h) = slopes[h];
  return out;
}

void validate_alibi(const char* fn, int num_heads, long long seq_q, long long seq_k, AlibiMode mode) {
  require_positive(fn, "num_heads", num_heads);
  require_positive(fn, "seq_q", seq_q);
  require_positive(fn, "seq_k", seq_k);
  if (mode == AlibiMode::causal)
    require(seq_q <= seq_k, fn, "causal ALiBi needs seq_q (", seq_q, ") <= seq_k (", seq_k, ")");
}

Tensor3 alibi_bias(int num_heads, long long seq_q, long long seq_k, AlibiMode mode) {
  validate_alibi("alibi_bias", num_heads, seq_q, seq_k, mode);
  const DTensor1 m = alibi_slopes(num_heads);
  const auto heads = static_cast<std::size_t>(num_heads), nq = static_cast<std::size_t>(seq_q),
             nk = static_cast<std::size_t>(seq_k);
  Tensor3 bias = Tensor3::from_shape({heads, nq, nk});
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < nq; ++i) {
      // i' = i + seq_k - seq_q: aligned to the last key (negative for early queries when seq_q > seq_k).
      const double query_position = static_cast<double>(i) + static_cast<double>(nk) - static_cast<double>(nq);
      for (std::size_t j = 0; j < nk; ++j) {
        const double distance = query_position - static_cast<double>(j);
        // B_hij = -m_h (i' - j) (causal, -inf for future keys) or -m_h |i' - j| (symmetric).
        if (mode == AlibiMode::causal && distance < 0) {
          bias(h, i, j) = -std::numeric_limits<float>::infinity();
        } else {
          bias(h, i, j) = static_cast<float>(0.0 - m(h) * std::fabs(distance));  // 0 - x: +0 at distance 0
        }
      }
    }
  return bias;
}

}  // namespace tvlab::ref
