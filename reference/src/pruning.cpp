#include "tvlab/ref/pruning.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tvlab/core/error.hpp"

namespace tvlab::ref {
namespace {

void validate_heads(const char* fn, const Tensor3& heads, const Tensor2& w_o) {
  require_nonempty(fn, "heads", heads);
  require_nonempty(fn, "w_o", w_o);
  const std::size_t h = heads.shape()[0], d_h = heads.shape()[2];
  require(w_o.shape()[0] == h * d_h, fn, "w_o has ", w_o.shape()[0], " rows, expected heads x d_h = ", h * d_h);
  require_finite(fn, "heads", heads);
  require_finite(fn, "w_o", w_o);
}

}  // namespace

Tensor2 magnitude_prune(const Tensor2& w, double sparsity) {
  const char* fn = "magnitude_prune";
  require(sparsity >= 0.0 && sparsity <= 1.0, fn, "sparsity (", sparsity, ") must lie in [0, 1]");
  require_nonempty(fn, "w", w);
  require_finite(fn, "w", w);
  // the indices in order of |w|, smallest first (a stable sort: ties keep row-major order)
  std::vector<std::size_t> order(w.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return std::fabs(w.data()[a]) < std::fabs(w.data()[b]); });
  const auto removed = static_cast<std::size_t>(std::llround(sparsity * static_cast<double>(w.size())));
  Tensor2 out = w;
  for (std::size_t i = 0; i < removed; ++i) out.data()[order[i]] = 0.0f;
  return out;
}

Sparse24 prune_2_4(const Tensor2& w) {
  const char* fn = "prune_2_4";
  require_nonempty(fn, "w", w);
  require(w.shape()[1] % 4 == 0, fn, "w's row length (", w.shape()[1], ") must be a multiple of 4");
  require_finite(fn, "w", w);
  Sparse24 s{w.shape()[0], w.shape()[1], {}, {}};
  for (std::size_t r = 0; r < s.rows; ++r)
    for (std::size_t g = 0; g < s.cols / 4; ++g) {
      // the two largest |w| of the group (the lower position on a tie), kept in order of position
      std::size_t first = 0, second = 1;
      const float* x = &w(r, 4 * g);
      if (std::fabs(x[1]) > std::fabs(x[0])) std::swap(first, second);
      for (std::size_t p = 2; p < 4; ++p) {
        if (std::fabs(x[p]) > std::fabs(x[first])) {
          second = first;
          first = p;
        } else if (std::fabs(x[p]) > std::fabs(x[second])) {
          second = p;
        }
      }
      for (std::size_t p : {std::min(first, second), std::max(first, second)}) {
        s.values.push_back(x[p]);
        s.positions.push_back(static_cast<std::uint8_t>(p));
      }
    }
  return s;
}

void validate_sparse_2_4(const char* function, const Sparse24& s) {
  require(s.cols % 4 == 0 && s.values.size() == s.rows * s.cols / 2 && s.positions.size() == s.values.size(), function,
          "s is malformed: ", s.values.size(), " values and ", s.positions.size(), " positions for ", s.rows, " x ", s.cols);
  for (std::size_t i = 0; i < s.values.size(); i += 2) {
    require(s.positions[i] < 4 && s.positions[i + 1] < 4, function, "s.positions[", i, "..", i + 1, "] = ",
            int(s.positions[i]), ", ", int(s.positions[i + 1]), ": a position is not 0 to 3");
    require(s.positions[i] < s.positions[i + 1], function, "s.positions[", i, "..", i + 1, "] = ", int(s.positions[i]), ", ",
            int(s.positions[i + 1]), ": a group's two positions must increase");
  }
  require_finite(function, "s.values", s.values);
}

Tensor2 densify(const Sparse24& s) {
  validate_sparse_2_4("densify", s);
  Tensor2 out = xt::zeros<float>({s.rows, s.cols});
  for (std::size_t i = 0; i < s.values.size(); ++i) {
    const std::size_t group = i / 2, r = group / (s.cols / 4), g = group % (s.cols / 4);
    out(r, 4 * g + s.positions[i]) = s.values[i];
  }
  return out;
}

Tensor1 sparse_2_4_gemv(const Sparse24& s, const Tensor1& x) {
  const char* fn = "sparse_2_4_gemv";
  validate_sparse_2_4(fn, s);
  require(x.size() == s.cols, fn, "x has ", x.size(), " values, expected s.cols = ", s.cols);
  require_finite(fn, "x", x);
  Tensor1 y = Tensor1::from_shape({s.rows});
  const std::size_t per_row = s.cols / 2;
  for (std::size_t r = 0; r < s.rows; ++r) {
    // y_r = sum over the kept values v of row r of v x_{4g + p}: half the multiplications of a dense row
    double sum = 0.0;
    for (std::size_t i = r * per_row; i < (r + 1) * per_row; ++i)
      sum += static_cast<double>(s.values[i]) * x(4 * (i % per_row / 2) + s.positions[i]);
    y(r) = static_cast<float>(sum);
  }
  return y;
}

Tensor2 masked_head_output(const Tensor3& heads, const Tensor2& w_o, const std::vector<bool>& keep) {
  const char* fn = "masked_head_output";
  validate_heads(fn, heads, w_o);
  const std::size_t h = heads.shape()[0], n = heads.shape()[1], d_h = heads.shape()[2], d_model = w_o.shape()[1];
  require(keep.size() == h, fn, "keep has ", keep.size(), " entries, expected one per head (", h, ")");
  // O = sum over kept heads of head_h W_O^(h), W_O^(h) the rows h d_h .. (h + 1) d_h - 1 of W_O
  DTensor2 out = xt::zeros<double>({n, d_model});
  for (std::size_t head = 0; head < h; ++head) {
    if (!keep[head]) continue;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < d_h; ++c)
        for (std::size_t j = 0; j < d_model; ++j) out(i, j) += double(heads(head, i, c)) * w_o(head * d_h + c, j);
  }
  return xt::cast<float>(out);
}

std::vector<double> head_importance(const Tensor3& heads, const Tensor2& w_o) {
  const char* fn = "head_importance";
  validate_heads(fn, heads, w_o);
  const std::size_t h = heads.shape()[0];
  const Tensor2 full = masked_head_output(heads, w_o, std::vector<bool>(h, true));
  double full_sq = 0.0;
  for (float v : full) full_sq += double(v) * v;
  require(full_sq > 0.0, fn, "the attention output is all zero: no head changes it");
  std::vector<double> importance(h);
  for (std::size_t head = 0; head < h; ++head) {
    std::vector<bool> only(h, false);
    only[head] = true;  // the change when head h is masked is its own term
    const Tensor2 term = masked_head_output(heads, w_o, only);
    double sq = 0.0;
    for (float v : term) sq += double(v) * v;
    importance[head] = std::sqrt(sq / full_sq);
  }
  return importance;
}

}  // namespace tvlab::ref
