#include "tvlab/opt/softmax.hpp"

#include <xsimd/xsimd.hpp>

#include <cmath>
#include <limits>

#include "tvlab/core/error.hpp"

namespace tvlab::opt {

// Differs from ref::softmax: float accumulation instead of double, xsimd batches instead of
// scalars, and the exponentials are written into the output row so they are computed once.
// Error: float sums of n terms each in (0, 1] carry a relative error of about n * eps / 2 in
// the worst case, far inside the row-reduction tolerance the tests use.
void softmax_row_inplace(float* row, std::size_t n) {
  using batch = xsimd::batch<float>;
  constexpr std::size_t width = batch::size;
  const std::size_t vec_end = n - n % width;

  // Pass 1: the row maximum m.
  float m = -std::numeric_limits<float>::infinity();
  if (vec_end > 0) {
    batch vmax = batch::load_unaligned(row);
    for (std::size_t j = width; j < vec_end; j += width) vmax = xsimd::max(vmax, batch::load_unaligned(row + j));
    alignas(64) float lanes[width];
    vmax.store_aligned(lanes);
    for (float lane : lanes) m = std::max(m, lane);
  }
  for (std::size_t j = vec_end; j < n; ++j) m = std::max(m, row[j]);
  if (m == -std::numeric_limits<float>::infinity()) {  // fully masked row: defined as zeros
    for (std::size_t j = 0; j < n; ++j) row[j] = 0.0f;
    return;
  }

  // Pass 2: e_j = exp(x_j - m), stored in place, and their sum l.
  const batch vm(m);
  batch vsum(0.0f);
  for (std::size_t j = 0; j < vec_end; j += width) {
    const batch e = xsimd::exp(batch::load_unaligned(row + j) - vm);
    e.store_unaligned(row + j);
    vsum += e;
  }
  float l = xsimd::hadd(vsum);
  for (std::size_t j = vec_end; j < n; ++j) {
    row[j] = std::exp(row[j] - m);
    l += row[j];
  }

  // Pass 3: scale by 1 / l (one division, n multiplications).
  const float inv_l = 1.0f / l;
  const batch vinv(inv_l);
  for (std::size_t j = 0; j < vec_end; j += width) (batch::load_unaligned(row + j) * vinv).store_unaligned(row + j);
  for (std::size_t j = vec_end; j < n; ++j) row[j] *= inv_l;
}

Tensor2 softmax(const Tensor2& x) {
  require_nonempty("softmax", "x", x);
  for (float value : x) {
    require(!std::isnan(value) && value != std::numeric_limits<float>::infinity(), "softmax", "x contains ",
            value, "; softmax is defined for finite values and -inf (weight 0)");
  }
  Tensor2 y = x;
  const std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(y.shape()[0]);
  const std::size_t cols = y.shape()[1];
#pragma omp parallel for schedule(static) if (rows * static_cast<std::ptrdiff_t>(cols) > 32768)
  for (std::ptrdiff_t i = 0; i < rows; ++i) softmax_row_inplace(y.data() + static_cast<std::size_t>(i) * cols, cols);
  return y;
}

}  // namespace tvlab::opt
