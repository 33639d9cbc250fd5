#include "tvlab/core/attention_config.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tvlab/core/error.hpp"

namespace tvlab {

namespace {

double checked_scale(const char* fn, const std::optional<double>& scale, std::size_t head_dim) {
  const double value = scale.value_or(1.0 / std::sqrt(static_cast<double>(head_dim)));
  require(std::isfinite(value) && value > 0.0 && value <= std::numeric_limits<float>::max(), fn, "scale (", value,
          ") must be positive and representable in float");
  return value;
}

}  // namespace

double validate_attention_config(const char* fn, std::size_t heads, std::size_t seq_q, std::size_t seq_k,
                                 std::size_t head_dim, const AttentionConfig& cfg) {
  validate_attention_mask(fn, heads, seq_q, seq_k, cfg.mask);
  return checked_scale(fn, cfg.scale, head_dim);
}

double validate_attention(const char* fn, const Tensor3& q, const Tensor3& k, const Tensor3& v,
                          const AttentionConfig& cfg, double qk_growth) {
  return validate_attention(fn, q, k, v, cfg.scale, cfg.mask, qk_growth);
}

double validate_attention(const char* fn, const Tensor3& q, const Tensor3& k, const Tensor3& v,
                          const std::optional<double>& scale_option, const AttentionMask& mask, double qk_growth) {
  require_nonempty(fn, "q", q);
  require_nonempty(fn, "k", k);
  require_nonempty(fn, "v", v);
  require_dim(fn, "k", k, 0, "heads", q.shape()[0], "the heads of q");
  require_dim(fn, "v", v, 0, "heads", q.shape()[0], "the heads of q");
  require_dim(fn, "k", k, 2, "head_dim", q.shape()[2], "the head_dim of q");
  require_dim(fn, "v", v, 1, "seq", k.shape()[1], "the seq of k");
  // The finiteness checks and the largest |q|, |k| below in one pass over each input.
  const double q_max = qk_growth * static_cast<double>(require_finite_max_abs(fn, "q", q));
  const double k_max = qk_growth * static_cast<double>(require_finite_max_abs(fn, "k", k));
  require_finite_max_abs(fn, "v", v);
  const std::size_t seq_q = q.shape()[1], seq_k = k.shape()[1];
  validate_attention_mask(fn, q.shape()[0], seq_q, seq_k, mask);
  const double scale = checked_scale(fn, scale_option, q.shape()[2]);
  // Every backend forms the unscaled dot product q . k in float, then scales it and adds the
  // bias: |q . k| <= d_k max|q| max|k| and |S_ij| <= scale * that + max|b| must stay inside
  // float's range (3.4e38); 1e38 leaves room for rounding. A caller that transforms q and k
  // first (RoPE: a rotation mixes the two coordinates of a pair, so a coordinate grows by at most
  // sqrt(2) a_f) passes that growth.
  const double dot_bound = static_cast<double>(q.shape()[2]) * q_max * k_max;
  double bias_max = 0.0;
  if (mask.bias)
    for (float b : *mask.bias)
      if (std::isfinite(b)) bias_max = std::max(bias_max, static_cast<double>(std::fabs(b)));
  if (mask.alibi_slopes)  // |i' - j| <= max(seq_q, seq_k) - 1 (seq_k - 1 with the bottom-right alignment)
    bias_max += xt::amax(*mask.alibi_slopes)() * static_cast<double>(std::max(seq_q, seq_k) - 1);
  require(dot_bound <= 1e38, fn, "q and k are too large: q . k could reach ", dot_bound,
          ", beyond float's range (3.4e38); scale them down");
  require(scale * dot_bound + bias_max <= 1e38, fn, "scores could reach ", scale * dot_bound + bias_max,
          " (scale * q . k + mask.bias + ALiBi), beyond float's range (3.4e38)");
  return scale;
}

std::size_t validate_mha(const char* fn, const Tensor2& x_q, const Tensor2& x_kv, const MhaWeights& w,
                         int num_heads, const AttentionConfig& cfg) {
  require_positive(fn, "num_heads", num_heads);
  require_nonempty(fn, "x_q", x_q);
  require_nonempty(fn, "x_kv", x_kv);
  const std::size_t d_model = x_q.shape()[1];
  require_dim(fn, "x_kv", x_kv, 1, "d_model", d_model, "the d_model of x_q");
  require_nonempty(fn, "w_q", w.w_q);
  const std::size_t inner = w.w_q.shape()[1];
  require_dim(fn, "w_q", w.w_q, 0, "rows", d_model, "d_model");
  require_dim(fn, "w_k", w.w_k, 0, "rows", d_model, "d_model");
  require_dim(fn, "w_v", w.w_v, 0, "rows", d_model, "d_model");
  require_dim(fn, "w_k", w.w_k, 1, "columns", inner, "the columns of w_q, num_heads * head_dim");
  require_dim(fn, "w_v", w.w_v, 1, "columns", inner, "the columns of w_q, num_heads * head_dim");
  require_dim(fn, "w_o", w.w_o, 0, "rows", inner, "num_heads * head_dim");
  require_dim(fn, "w_o", w.w_o, 1, "columns", d_model, "d_model");
  require(inner % static_cast<std::size_t>(num_heads) == 0, fn, "num_heads * head_dim (", inner,
          ", the columns of w_q) must be a multiple of num_heads (", num_heads, ")");
  require_finite(fn, "x_q", x_q);
  require_finite(fn, "x_kv", x_kv);
  require_finite(fn, "w_q", w.w_q);
  require_finite(fn, "w_k", w.w_k);
  require_finite(fn, "w_v", w.w_v);
  require_finite(fn, "w_o", w.w_o);
  const std::size_t head_dim = inner / static_cast<std::size_t>(num_heads);
  validate_attention_config(fn, static_cast<std::size_t>(num_heads), x_q.shape()[0], x_kv.shape()[0], head_dim, cfg);
  return head_dim;
}

}  // namespace tvlab
