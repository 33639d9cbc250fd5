#include "tvlab/opt/softmax.hpp"

#include <xsimd/xsimd.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"

namespace tvlab::opt {

// Differs from ref::softmax: float accumulation instead of double, xsimd batches instead of
// scalars, and the exponentials are written into the output row so they are computed once.
// Error: float sums of n terms each in (0, 1] carry a relative error of about n * eps / 2 in
// the worst case, far inside the row-reduction tolerance the tests use.
//
// No separate scan for NaN/+inf: either one makes the sum l NaN (exp(NaN - m), or
// exp(inf - inf) when the maximum is +inf), so checking l costs nothing. The only other way a
// NaN could hide is a row whose maximum came out as -inf: that row is checked element by element.
bool softmax_row(const float* x, float* y, std::size_t n) {
  using batch = xsimd::batch<float>;
  constexpr std::size_t width = batch::size;
  const std::size_t vec_end = n - n % width;
  constexpr float neg_inf = -std::numeric_limits<float>::infinity();

  // Pass 1: the row maximum m.
  float m = neg_inf;
  if (vec_end > 0) {
    batch vmax = batch::load_unaligned(x);
    for (std::size_t j = width; j < vec_end; j += width) vmax = xsimd::max(vmax, batch::load_unaligned(x + j));
    alignas(64) float lanes[width];
    vmax.store_aligned(lanes);
    for (float lane : lanes) m = std::max(m, lane);
  }
  for (std::size_t j = vec_end; j < n; ++j) m = std::max(m, x[j]);
  if (m == neg_inf) {  // fully masked row: defined as zeros (after making sure it holds only -inf)
    bool only_neg_inf = true;
    for (std::size_t j = 0; j < n; ++j) only_neg_inf = only_neg_inf && x[j] == neg_inf;
    for (std::size_t j = 0; j < n; ++j) y[j] = 0.0f;
    return only_neg_inf;
  }

  // Pass 2: e_j = exp(x_j - m), stored in y, and their sum l.
  const batch vm(m);
  batch vsum(0.0f);
  for (std::size_t j = 0; j < vec_end; j += width) {
    const batch e = xsimd::exp(batch::load_unaligned(x + j) - vm);
    e.store_unaligned(y + j);
    vsum += e;
  }
  float l = xsimd::hadd(vsum);
  for (std::size_t j = vec_end; j < n; ++j) {
    y[j] = std::exp(x[j] - m);
    l += y[j];
  }
  if (!std::isfinite(l)) return false;  // a NaN or +inf in x

  // Pass 3: scale by 1 / l (one division, n multiplications).
  const float inv_l = 1.0f / l;
  const batch vinv(inv_l);
  for (std::size_t j = 0; j < vec_end; j += width) (batch::load_unaligned(y + j) * vinv).store_unaligned(y + j);
  for (std::size_t j = vec_end; j < n; ++j) y[j] *= inv_l;
  return true;
}

void softmax_row_inplace(float* row, std::size_t n) { softmax_row(row, row, n); }

Tensor2 softmax(const Tensor2& x) {
  require_nonempty("softmax", "x", x);
  const std::size_t rows = x.shape()[0], cols = x.shape()[1];
  Tensor2 y = Tensor2::from_shape({rows, cols});
  std::vector<unsigned char> bad(rows, 0);  // rows holding NaN/+inf, reported after the parallel loop
#pragma omp parallel for schedule(static) if (rows * cols > 32768)
  for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(rows); ++i) {
    const std::size_t offset = static_cast<std::size_t>(i) * cols;
    bad[static_cast<std::size_t>(i)] = !softmax_row(x.data() + offset, y.data() + offset, cols);
  }
  for (std::size_t i = 0; i < rows; ++i) {
    if (!bad[i]) continue;
    for (std::size_t j = 0; j < cols; ++j) {
      const float value = x(i, j);
      require(!std::isnan(value) && value != std::numeric_limits<float>::infinity(), "softmax", "x contains ",
              value, " at (", i, ", ", j, "); softmax is defined for finite values and -inf (weight 0)");
    }
  }
  return y;
}

}  // namespace tvlab::opt
