#include "tvlab/ref/gqa_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "gqa_detail.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/ref/rope.hpp"

namespace tvlab::ref {

namespace detail {

Tensor3 project_to_heads(const Tensor2& x, std::size_t first_row, const Tensor2& w, std::size_t heads,
                         std::size_t head_dim, std::uint64_t& macs) {
  const std::size_t rows = x.shape()[0] - first_row, d_model = x.shape()[1];
  Tensor3 out = Tensor3::from_shape({heads, rows, head_dim});
  // P^(t)_id = sum_c X[first_row + i, c] W[c, t d_k + d]: d_model multiply-adds per element.
  for (std::size_t t = 0; t < heads; ++t)
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t d = 0; d < head_dim; ++d) {
        double acc = 0.0;
        for (std::size_t c = 0; c < d_model; ++c)
          acc += static_cast<double>(x(first_row + i, c)) * w(c, t * head_dim + d);
        macs += d_model;
        out(t, i, d) = static_cast<float>(acc);
      }
  return out;
}

Tensor2 project_from_heads(const Tensor3& o, const Tensor2& w_o, std::uint64_t& macs) {
  const std::size_t heads = o.shape()[0], rows = o.shape()[1], head_dim = o.shape()[2];
  const std::size_t d_model = w_o.shape()[1];
  Tensor2 y = Tensor2::from_shape({rows, d_model});
  // Y_ic = sum_t sum_d O^(t)_id W_o[t d_k + d, c]  (concatenate the heads, then project).
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t c = 0; c < d_model; ++c) {
      double acc = 0.0;
      for (std::size_t t = 0; t < heads; ++t)
        for (std::size_t d = 0; d < head_dim; ++d) acc += static_cast<double>(o(t, i, d)) * w_o(t * head_dim + d, c);
      macs += heads * head_dim;
      y(i, c) = static_cast<float>(acc);
    }
  return y;
}

}  // namespace detail

double validate_grouped_attention(const char* fn, const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                  std::size_t seq_k, const std::optional<double>& scale_option,
                                  const AttentionMask& mask) {
  require_nonempty(fn, "q", q);
  require_nonempty(fn, "k", k);
  require_nonempty(fn, "v", v);
  const std::size_t h = q.shape()[0], g = k.shape()[0];
  require(h % g == 0, fn, "k has ", g, " heads (num_kv_heads), which must divide the ", h,
          " heads of q (num_heads): num_heads must be a multiple of num_kv_heads");
  require_dim(fn, "v", v, 0, "heads", g, "num_kv_heads, the heads of k");
  require_dim(fn, "k", k, 2, "head_dim", q.shape()[2], "the head_dim of q");
  require_dim(fn, "v", v, 1, "seq", k.shape()[1], "the seq of k");
  require(seq_k >= 1 && seq_k <= k.shape()[1], fn, "seq_k (", seq_k, ") must be between 1 and the rows of k (",
          k.shape()[1], ")");
  const double q_max = require_finite_max_abs(fn, "q", q);
  // Only the first seq_k rows are keys; the rest (a cache's free slots) are never read.
  double k_max = 0.0;
  for (std::size_t j = 0; j < g; ++j)
    for (std::size_t i = 0; i < seq_k; ++i)
      for (std::size_t d = 0; d < k.shape()[2]; ++d) {
        require(std::isfinite(k(j, i, d)), fn, "k has a non-finite value at (", j, ", ", i, ", ", d, ")");
        k_max = std::max(k_max, static_cast<double>(std::fabs(k(j, i, d))));
      }
  for (std::size_t j = 0; j < g; ++j)
    for (std::size_t i = 0; i < seq_k; ++i)
      for (std::size_t d = 0; d < v.shape()[2]; ++d)
        require(std::isfinite(v(j, i, d)), fn, "v has a non-finite value at (", j, ", ", i, ", ", d, ")");
  validate_attention_mask(fn, h, q.shape()[1], seq_k, mask);
  const std::size_t head_dim = q.shape()[2];
  const double scale = scale_option.value_or(1.0 / std::sqrt(static_cast<double>(head_dim)));
  require(std::isfinite(scale) && scale > 0.0 && scale <= std::numeric_limits<float>::max(), fn, "scale (", scale,
          ") must be positive and representable in float");
  // As chapter 00 (validate_attention): |q . k| <= d_k max|q| max|k| must stay inside float's range.
  const double dot_bound = static_cast<double>(head_dim) * q_max * k_max;
  require(dot_bound <= 1e38 && scale * dot_bound <= 1e38, fn, "q and k are too large: scale * q . k could reach ",
          scale * dot_bound, ", beyond float's range (3.4e38); scale them down");
  return scale;
}

Tensor3 grouped_scaled_dot_product_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                             const AttentionConfig& cfg) {
  const char* fn = "grouped_scaled_dot_product_attention";
  const double scale = validate_grouped_attention(fn, q, k, v, k.shape()[1], cfg.scale, cfg.mask);
  return detail::grouped_attention(q, k, v, k.shape()[1], scale, cfg.mask);
}

GqaShape validate_grouped_query_attention(const char* fn, const Tensor2& x_q, const Tensor2& x_kv, const GqaWeights& w,
                                          const KvHeads& heads, const AttentionConfig& cfg,
                                          const std::optional<AttentionRope>& rope) {
  const GqaShape shape = validate_gqa_weights(fn, w, heads);
  require_nonempty(fn, "x_q", x_q);
  require_nonempty(fn, "x_kv", x_kv);
  require_dim(fn, "x_q", x_q, 1, "d_model", shape.d_model, "the rows of w_q");
  require_dim(fn, "x_kv", x_kv, 1, "d_model", shape.d_model, "the rows of w_q");
  require_finite(fn, "x_q", x_q);
  require_finite(fn, "x_kv", x_kv);
  validate_attention_config(fn, static_cast<std::size_t>(heads.num_heads), x_q.shape()[0], x_kv.shape()[0],
                            shape.head_dim, cfg);
  if (rope) validate_attention_rope(fn, *rope, x_q.shape()[0], x_kv.shape()[0], shape.head_dim);
  return shape;
}

Tensor2 grouped_query_attention(const Tensor2& x_q, const Tensor2& x_kv, const GqaWeights& w, const KvHeads& heads,
                                const AttentionConfig& cfg, const std::optional<AttentionRope>& rope) {
  const char* fn = "grouped_query_attention";
  const GqaShape shape = validate_grouped_query_attention(fn, x_q, x_kv, w, heads, cfg, rope);
  const std::size_t h = static_cast<std::size_t>(heads.num_heads), g = static_cast<std::size_t>(heads.num_kv_heads);

  std::uint64_t macs = 0;  // not reported here; see prefill and decode (kv_cache.hpp)
  // h query heads from X_q; only g key and g value heads from X_kv.
  Tensor3 q = detail::project_to_heads(x_q, 0, w.w_q, h, shape.head_dim, macs);
  Tensor3 k = detail::project_to_heads(x_kv, 0, w.w_k, g, shape.head_dim, macs);
  const Tensor3 v = detail::project_to_heads(x_kv, 0, w.w_v, g, shape.head_dim, macs);
  if (rope) {
    // q'_i = R(p0 + n_k - n_q + i) q_i, k'_j = R(p0 + j) k_j (chapter 02's rope_attention).
    const auto query_shift = static_cast<long long>(x_kv.shape()[0] - x_q.shape()[0]);
    q = apply_rope(q, rope->freqs, rope->layout, rope->first_position + query_shift);
    k = apply_rope(k, rope->freqs, rope->layout, rope->first_position);
  }
  const double scale = validate_grouped_attention(fn, q, k, v, k.shape()[1], cfg.scale, cfg.mask);
  return detail::project_from_heads(detail::grouped_attention(q, k, v, k.shape()[1], scale, cfg.mask), w.w_o, macs);
}

}  // namespace tvlab::ref
