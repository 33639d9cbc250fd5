#include "tvlab/ref/attention.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"
#include "gqa_detail.hpp"

namespace tvlab::ref {

// The loops of attention, written once. Query head t reads key/value head t / (h/g): here, in
// multi-head attention, g = h and head t reads head t; chapter 05's grouped-query attention shares
// each key/value head among h/g query heads, and only that index changes.
namespace detail {

Tensor3 grouped_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, std::size_t seq_k, double scale,
                          const AttentionMask& mask) {
  const std::size_t h = q.shape()[0], seq_q = q.shape()[1], head_dim = q.shape()[2];
  const std::size_t g = k.shape()[0], head_dim_v = v.shape()[2];
  const std::size_t group_size = h / g;  // h/g query heads read each kv head
  const double neg_inf = -std::numeric_limits<double>::infinity();

  Tensor3 out = Tensor3::from_shape({h, seq_q, head_dim_v});
  std::vector<double> s(seq_k);  // one row of scores, then of probabilities
  for (std::size_t t = 0; t < h; ++t) {
    const std::size_t kv = t / group_size;  // kappa(t): the only difference from multi-head attention
    for (std::size_t i = 0; i < seq_q; ++i) {
      // S_ij = scale * sum_d Q_tid K_kv,jd + B_tij where the mask allows j, else -inf.
      double m = neg_inf;
      for (std::size_t j = 0; j < seq_k; ++j) {
        if (!mask.allows(i, j, seq_q, seq_k)) {
          s[j] = neg_inf;
          continue;
        }
        double dot = 0.0;
        for (std::size_t d = 0; d < head_dim; ++d) dot += static_cast<double>(q(t, i, d)) * k(kv, j, d);
        s[j] = scale * dot + mask.score_bias(t, i, j, seq_q, seq_k);
        m = std::max(m, s[j]);
      }
      // A fully masked row has output 0 (FlashAttention's convention, as chapter 00).
      if (m == neg_inf) {
        for (std::size_t d = 0; d < head_dim_v; ++d) out(t, i, d) = 0.0f;
        continue;
      }
      // P_ij = exp(S_ij - m_i) / l_i with l_i = sum_j exp(S_ij - m_i).
      double l = 0.0;
      for (std::size_t j = 0; j < seq_k; ++j) {
        s[j] = std::exp(s[j] - m);
        l += s[j];
      }
      // O_tid = sum_j P_ij V_kv,jd.
      for (std::size_t d = 0; d < head_dim_v; ++d) {
        double acc = 0.0;
        for (std::size_t j = 0; j < seq_k; ++j) acc += s[j] * v(kv, j, d);
        out(t, i, d) = static_cast<float>(acc / l);
      }
    }
  }
  return out;
}

}  // namespace detail

Tensor3 scaled_dot_product_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                     const AttentionConfig& cfg) {
  const double scale = validate_attention("scaled_dot_product_attention", q, k, v, cfg);
  // Each query head reads its own key/value head: grouped attention with g = h (below).
  return detail::grouped_attention(q, k, v, k.shape()[1], scale, cfg.mask);
}

Tensor2 multi_head_attention(const Tensor2& x_q, const Tensor2& x_kv, const MhaWeights& w, int num_heads,
                             const AttentionConfig& cfg) {
  const std::size_t head_dim = validate_mha("multi_head_attention", x_q, x_kv, w, num_heads, cfg);
  const std::size_t heads = static_cast<std::size_t>(num_heads);
  const std::size_t seq_q = x_q.shape()[0], seq_k = x_kv.shape()[0], d_model = x_q.shape()[1];

  // Q^(h)_id = sum_c X_q[i, c] W_q[c, h*d_k + d]   (and the same for K, V from X_kv).
  auto project = [&](const Tensor2& x, const Tensor2& weight, std::size_t seq) {
    Tensor3 t = Tensor3::from_shape({heads, seq, head_dim});
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t i = 0; i < seq; ++i)
        for (std::size_t d = 0; d < head_dim; ++d) {
          double acc = 0.0;
          for (std::size_t c = 0; c < d_model; ++c) acc += static_cast<double>(x(i, c)) * weight(c, h * head_dim + d);
          t(h, i, d) = static_cast<float>(acc);
        }
    return t;
  };
  const Tensor3 q = project(x_q, w.w_q, seq_q);
  const Tensor3 k = project(x_kv, w.w_k, seq_k);
  const Tensor3 v = project(x_kv, w.w_v, seq_k);
  const Tensor3 heads_out = scaled_dot_product_attention(q, k, v, cfg);

  // Y_ic = sum_h sum_d head_h[i, d] W_o[h*d_k + d, c]  (concatenate the heads, then project).
  Tensor2 y = Tensor2::from_shape({seq_q, d_model});
  for (std::size_t i = 0; i < seq_q; ++i)
    for (std::size_t c = 0; c < d_model; ++c) {
      double acc = 0.0;
      for (std::size_t h = 0; h < heads; ++h)
        for (std::size_t d = 0; d < head_dim; ++d) acc += static_cast<double>(heads_out(h, i, d)) * w.w_o(h * head_dim + d, c);
      y(i, c) = static_cast<float>(acc);
    }
  return y;
}

}  // namespace tvlab::ref
