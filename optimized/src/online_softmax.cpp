#include "tvlab/opt/online_softmax.hpp"

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "tvlab/core/error.hpp"

namespace tvlab::opt {
namespace {

using Batch = xsimd::batch<float>;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// max of x[0, n): whole batches, then the tail.
float block_max(const float* x, std::size_t n) {
  const std::size_t vec_end = n - n % Batch::size;
  float m = kNegInf;
  if (vec_end > 0) {
    Batch vmax = Batch::load_unaligned(x);
    for (std::size_t j = Batch::size; j < vec_end; j += Batch::size) vmax = xsimd::max(vmax, Batch::load_unaligned(x + j));
    alignas(64) float lanes[Batch::size];
    vmax.store_aligned(lanes);
    m = *std::max_element(lanes, lanes + Batch::size);
  }
  for (std::size_t j = vec_end; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

// sum_j e^{x_j - m} over x[0, n) (masked -inf entries give 0).
float block_sum_exp(const float* x, std::size_t n, float m) {
  const std::size_t vec_end = n - n % Batch::size;
  const Batch vm(m);
  Batch vsum(0.0f);
  for (std::size_t j = 0; j < vec_end; j += Batch::size) vsum += xsimd::exp(Batch::load_unaligned(x + j) - vm);
  float sum = xsimd::hadd(vsum);
  for (std::size_t j = vec_end; j < n; ++j) sum += std::exp(x[j] - m);
  return sum;
}

}  // namespace

Tensor2 online_softmax(const Tensor2& x, std::size_t block) {
  const char* fn = "online_softmax";
  require_nonempty(fn, "x", x);
  require(block > 0, fn, "block (", block, ") must be positive");
  require_finite_or_neg_inf(fn, "x", x);
  const std::size_t rows = x.shape()[0], cols = x.shape()[1];
  Tensor2 y = Tensor2::from_shape({rows, cols});
#pragma omp parallel for schedule(static) if (rows * cols > 32768)
  for (std::ptrdiff_t r = 0; r < static_cast<std::ptrdiff_t>(rows); ++r) {
    const float* row = x.data() + static_cast<std::size_t>(r) * cols;
    float* out = y.data() + static_cast<std::size_t>(r) * cols;
    // Pass 1: per block, m' = max(m, block max), l' = l e^{m - m'} + sum e^{x - m'}.
    float m = kNegInf, l = 0.0f;
    for (std::size_t j = 0; j < cols; j += block) {
      const std::size_t n = std::min(block, cols - j);
      const float m_new = std::max(m, block_max(row + j, n));
      if (m_new == kNegInf) continue;  // only masked logits so far
      l = (m == kNegInf ? 0.0f : l * std::exp(m - m_new)) + block_sum_exp(row + j, n, m_new);
      m = m_new;
    }
    // Pass 2: y = e^{x - m} / l, zeros for a fully masked row.
    const Batch vm(m), vinv(l > 0.0f ? 1.0f / l : 0.0f);
    const std::size_t vec_end = cols - cols % Batch::size;
    for (std::size_t j = 0; j < vec_end; j += Batch::size)
      (l > 0.0f ? xsimd::exp(Batch::load_unaligned(row + j) - vm) * vinv : Batch(0.0f)).store_unaligned(out + j);
    for (std::size_t j = vec_end; j < cols; ++j) out[j] = l > 0.0f ? std::exp(row[j] - m) / l : 0.0f;
  }
  return y;
}

}  // namespace tvlab::opt
