#include "tvlab/core/attention_config.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tvlab/core/error.hpp"

namespace tvlab {

double validate_attention_config(const char* fn, std::size_t heads, std::size_t seq_q, std::size_t seq_k,
                                 std::size_t head_dim, const AttentionConfig& cfg) {
  if (cfg.causal) {
    require(seq_q <= seq_k, fn, "causal attention needs seq_q (", seq_q, ") <= seq_k (", seq_k,
            "): the causal diagonal is aligned to the last key");
  }
  if (cfg.mask) {
    require(cfg.mask->shape()[0] == seq_q && cfg.mask->shape()[1] == seq_k, fn, "mask has shape ",
            shape_string_of(*cfg.mask), ", expected [seq_q, seq_k] = [", seq_q, ", ", seq_k, "]");
  }
  if (cfg.additive_mask) {
    const auto& b = *cfg.additive_mask;
    require(b.shape()[0] == seq_q && b.shape()[1] == seq_k, fn, "additive_mask has shape ", shape_string_of(b),
            ", expected [seq_q, seq_k] = [", seq_q, ", ", seq_k, "]");
    for (float x : b) {
      require(!std::isnan(x) && x != INFINITY, fn, "additive_mask contains ", x,
              "; only finite values and -inf (forbidden) are allowed");
    }
  }
  if (cfg.rope || cfg.alibi_slopes) {
    require(seq_q <= seq_k, fn, "attention with positions (rope or alibi_slopes) needs seq_q (", seq_q,
            ") <= seq_k (", seq_k, "): the queries are the last seq_q of the seq_k positions");
  }
  if (cfg.rope) {
    validate_rope_frequencies(fn, cfg.rope->freqs, head_dim);
    require(cfg.rope->first_position >= 0, fn, "rope.first_position (", cfg.rope->first_position, ") must be >= 0");
  }
  if (cfg.alibi_slopes) {
    require_dim(fn, "alibi_slopes", *cfg.alibi_slopes, 0, "length", heads, "the number of heads");
    for (double m : *cfg.alibi_slopes)
      require(std::isfinite(m) && m >= 0.0, fn, "alibi_slopes contains ", m, "; slopes must be finite and >= 0");
  }
  const double scale = cfg.scale.value_or(1.0 / std::sqrt(static_cast<double>(head_dim)));
  require(std::isfinite(scale) && scale > 0.0 && scale <= std::numeric_limits<float>::max(), fn, "scale (", scale,
          ") must be positive and representable in float");
  return scale;
}

double validate_attention(const char* fn, const Tensor3& q, const Tensor3& k, const Tensor3& v,
                          const AttentionConfig& cfg) {
  require_nonempty(fn, "q", q);
  require_nonempty(fn, "k", k);
  require_nonempty(fn, "v", v);
  require_dim(fn, "k", k, 0, "heads", q.shape()[0], "the heads of q");
  require_dim(fn, "v", v, 0, "heads", q.shape()[0], "the heads of q");
  require_dim(fn, "k", k, 2, "head_dim", q.shape()[2], "the head_dim of q");
  require_dim(fn, "v", v, 1, "seq", k.shape()[1], "the seq of k");
  require_finite(fn, "q", q);
  require_finite(fn, "k", k);
  require_finite(fn, "v", v);
  const double scale = validate_attention_config(fn, q.shape()[0], q.shape()[1], k.shape()[1], q.shape()[2], cfg);
  // Every backend forms the unscaled dot product q . k in float, then scales it and adds the
  // bias: |q . k| <= d_k max|q| max|k| and |S_ij| <= scale * that + max|b| must stay inside
  // float's range (3.4e38); 1e38 leaves room for rounding. A rotation mixes the two coordinates
  // of a pair, so after RoPE a coordinate is at most sqrt(2) a_f times the largest input one.
  const double rope_growth = cfg.rope ? std::sqrt(2.0) * cfg.rope->freqs.attention_factor : 1.0;
  const double q_max = rope_growth * static_cast<double>(xt::amax(xt::abs(q))());
  const double k_max = rope_growth * static_cast<double>(xt::amax(xt::abs(k))());
  const double dot_bound = static_cast<double>(q.shape()[2]) * q_max * k_max;
  double bias_max = 0.0;
  if (cfg.additive_mask)
    for (float b : *cfg.additive_mask)
      if (std::isfinite(b)) bias_max = std::max(bias_max, static_cast<double>(std::fabs(b)));
  if (cfg.alibi_slopes)  // |i' - j| <= seq_k - 1
    bias_max += xt::amax(*cfg.alibi_slopes)() * static_cast<double>(k.shape()[1] - 1);
  require(dot_bound <= 1e38, fn, "q and k are too large: q . k could reach ", dot_bound,
          ", beyond float's range (3.4e38); scale them down");
  require(scale * dot_bound + bias_max <= 1e38, fn, "scores could reach ", scale * dot_bound + bias_max,
          " (scale * q . k + additive_mask + ALiBi), beyond float's range (3.4e38)");
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
