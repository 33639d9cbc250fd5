// Chapter 00 exercises: worked solutions. Each marked region is what a student writes;
// scripts/make_student.py turns this file into student.cpp with the regions replaced by
// NotImplemented stubs. Edit this file, then regenerate (`make student-stubs`).

#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/student/attention.hpp"
#include "tvlab/student/softmax.hpp"

namespace tvlab::student {

Tensor2 softmax(const Tensor2& x) {
  // BEGIN EXERCISE 00.1 "the numerically stable row softmax" "Softmax, stably"
  require_nonempty("softmax", "x", x);
  require_finite_or_neg_inf("softmax", "x", x);
  const std::size_t rows = x.shape()[0], cols = x.shape()[1];
  Tensor2 y = Tensor2::from_shape({rows, cols});
  for (std::size_t i = 0; i < rows; ++i) {
    // m = max_k x_ik: subtracting it keeps every exponent <= 0.
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t k = 0; k < cols; ++k) m = std::max(m, static_cast<double>(x(i, k)));
    if (m == -std::numeric_limits<double>::infinity()) {
      for (std::size_t k = 0; k < cols; ++k) y(i, k) = 0.0f;
      continue;
    }
    double l = 0.0;
    for (std::size_t k = 0; k < cols; ++k) l += std::exp(x(i, k) - m);
    for (std::size_t k = 0; k < cols; ++k) y(i, k) = static_cast<float>(std::exp(x(i, k) - m) / l);
  }
  return y;
  // END EXERCISE
}

Tensor3 scaled_dot_product_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                     const AttentionConfig& cfg) {
  // BEGIN EXERCISE 00.2 "scaled dot-product attention with causal and explicit masks" "Scaled dot-product attention, loop by loop"
  const double scale = validate_attention("scaled_dot_product_attention", q, k, v, cfg);
  const std::size_t heads = q.shape()[0], seq_q = q.shape()[1], seq_k = k.shape()[1];
  const std::size_t head_dim = q.shape()[2], head_dim_v = v.shape()[2];
  Tensor3 out = xt::zeros<float>({heads, seq_q, head_dim_v});
  std::vector<double> p(seq_k);
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < seq_q; ++i) {
      double m = -std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j < seq_k; ++j) {
        p[j] = -std::numeric_limits<double>::infinity();
        if (!cfg.mask.allows(i, j, seq_q, seq_k)) continue;
        double dot = 0.0;
        for (std::size_t d = 0; d < head_dim; ++d) dot += static_cast<double>(q(h, i, d)) * k(h, j, d);
        p[j] = scale * dot + cfg.mask.score_bias(h, i, j, seq_q, seq_k);
        m = std::max(m, p[j]);
      }
      if (m == -std::numeric_limits<double>::infinity()) continue;  // fully masked row: zeros
      double l = 0.0;
      for (double& s : p) l += (s = std::exp(s - m));
      for (std::size_t d = 0; d < head_dim_v; ++d) {
        double acc = 0.0;
        for (std::size_t j = 0; j < seq_k; ++j) acc += p[j] * v(h, j, d);
        out(h, i, d) = static_cast<float>(acc / l);
      }
    }
  return out;
  // END EXERCISE
}

}  // namespace tvlab::student
