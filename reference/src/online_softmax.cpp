#include "tvlab/ref/online_softmax.hpp"

#include <algorithm>
#include <cmath>

#include "tvlab/core/error.hpp"

namespace tvlab::ref {
namespace {

// e^{from - to}, the factor that moves a sum taken relative to `from` to one relative to `to`
// (to >= from). Both -inf means nothing was seen yet (the sum is 0): return 1, not e^{-inf + inf} = NaN.
double rescale(double from, double to) { return from == to ? 1.0 : std::exp(from - to); }

}  // namespace

SoftmaxState online_softmax_update(SoftmaxState state, std::span<const float> block) {
  // m' = max(m, max_j x_j)
  double block_max = -std::numeric_limits<double>::infinity();
  for (float x : block) {
    require(!std::isnan(x) && x != std::numeric_limits<float>::infinity(), "online_softmax_update", "block contains ",
            x, "; logits must be finite or -inf (masked)");
    block_max = std::max(block_max, static_cast<double>(x));
  }
  const double new_max = std::max(state.max, block_max);
  if (new_max == -std::numeric_limits<double>::infinity()) return state;  // only masked logits so far
  // l' = l e^{m - m'} + sum_j e^{x_j - m'}
  double sum = state.sum * rescale(state.max, new_max);
  for (float x : block) sum += std::exp(static_cast<double>(x) - new_max);
  return {new_max, sum};
}

SoftmaxState online_softmax_merge(SoftmaxState a, SoftmaxState b) {
  const double m = std::max(a.max, b.max);
  if (m == -std::numeric_limits<double>::infinity()) return {};
  // l = l_a e^{m_a - m} + l_b e^{m_b - m}
  return {m, a.sum * rescale(a.max, m) + b.sum * rescale(b.max, m)};
}

Tensor2 online_softmax(const Tensor2& x, std::size_t block) {
  const char* fn = "online_softmax";
  require_nonempty(fn, "x", x);
  require(block > 0, fn, "block (", block, ") must be positive");
  require_finite_or_neg_inf(fn, "x", x);
  const std::size_t rows = x.shape()[0], cols = x.shape()[1];
  Tensor2 y = Tensor2::from_shape({rows, cols});
  for (std::size_t i = 0; i < rows; ++i) {
    const float* row = x.data() + i * cols;
    // Pass 1: one block at a time, keeping only (m, l).
    SoftmaxState state;
    for (std::size_t j = 0; j < cols; j += block)
      state = online_softmax_update(state, std::span<const float>(row + j, std::min(block, cols - j)));
    // Pass 2: y_j = e^{x_j - m} / l (zeros for a row with nothing unmasked).
    for (std::size_t j = 0; j < cols; ++j)
      y(i, j) = state.sum > 0 ? static_cast<float>(std::exp(static_cast<double>(row[j]) - state.max) / state.sum) : 0.0f;
  }
  return y;
}

}  // namespace tvlab::ref
