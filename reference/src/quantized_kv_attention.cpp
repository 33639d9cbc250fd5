#include "tvlab/ref/quantized_kv_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"

namespace tvlab::ref {
namespace {

// The checks shared by the attention and its bound; returns the scale to use.
double validate_quantized_decode(const char* function, const Tensor2& q, const QuantizedKv& k, const QuantizedKv& v,
                                 const std::optional<double>& scale) {
  for (const auto& [name, x] : {std::pair<const char*, const QuantizedKv*>{"k", &k}, {"v", &v}}) {
    require(x->heads > 0 && x->seq > 0 && x->head_dim > 0, function, name, " is empty (", x->heads, " heads, ",
            x->seq, " tokens, head_dim ", x->head_dim, "): quantize a non-empty tensor with quantize_kv");
    validate_kv_quant_spec(function, x->spec, x->head_dim);
    const std::size_t elements = x->heads * x->seq * x->head_dim;
    const std::size_t code_bytes = x->spec.code == KvCodeType::int4 ? (elements + 1) / 2 : elements;
    const QuantizedKv shape_only{.spec = x->spec, .heads = x->heads, .seq = x->seq, .head_dim = x->head_dim};
    const std::size_t groups = shape_only.group_index(x->heads - 1, x->seq - 1, x->head_dim - 1) + 1;
    require(x->codes.size() == code_bytes && x->scales.size() == groups &&
                x->minimums.size() == (x->spec.symmetric ? 0 : groups),
            function, name, " has ", x->codes.size(), " code bytes, ", x->scales.size(), " scales and ",
            x->minimums.size(), " minimums; its shape and spec need ", code_bytes, ", ", groups, " and ",
            x->spec.symmetric ? 0 : groups);
  }
  require(v.heads == k.heads && v.seq == k.seq && v.head_dim == k.head_dim, function, "v has shape [", v.heads, ", ",
          v.seq, ", ", v.head_dim, "], expected [", k.heads, ", ", k.seq, ", ", k.head_dim, "] (the shape of k)");
  const std::size_t num_heads = q.shape()[0];
  require(num_heads > 0, function, "q has no head (shape ", shape_string_of(q), ")");
  require_dim(function, "q", q, 1, "head_dim", k.head_dim, "the head_dim of k");
  require(num_heads % k.heads == 0, function, "num_heads (", num_heads, ", the rows of q) must be a multiple of ",
          "num_kv_heads (", k.heads, ", the heads of k): each kv head serves h/g query heads");
  require_finite(function, "q", q);
  if (scale) {
    require(std::isfinite(*scale) && *scale > 0, function, "scale (", *scale, ") must be positive and finite");
    return *scale;
  }
  return 1.0 / std::sqrt(static_cast<double>(k.head_dim));
}

}  // namespace

Tensor2 quantized_kv_decode_attention(const Tensor2& q, const QuantizedKv& k, const QuantizedKv& v,
                                      std::optional<double> scale) {
  const double s = validate_quantized_decode("quantized_kv_decode_attention", q, k, v, scale);
  const std::size_t num_heads = q.shape()[0], d = k.head_dim, n = k.seq, group = num_heads / k.heads;
  Tensor2 out = Tensor2::from_shape({num_heads, d});
  std::vector<double> scores(n);
  for (std::size_t i = 0; i < num_heads; ++i) {
    const std::size_t g = i / group;  // g(i) = floor(i / (h / g))
    // s_t = scale q_i . k^_{g(i), t}, each key element dequantized as it is read; m = max_t s_t
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t t = 0; t < n; ++t) {
      double dot = 0.0;
      for (std::size_t c = 0; c < d; ++c) dot += double{q(i, c)} * k.dequantized(g, t, c);
      scores[t] = s * dot;
      m = std::max(m, scores[t]);
    }
    // l = sum_t e^{s_t - m};  o_i = sum_t (e^{s_t - m} / l) v^_{g(i), t}
    double l = 0.0;
    for (std::size_t t = 0; t < n; ++t) l += std::exp(scores[t] - m);
    for (std::size_t c = 0; c < d; ++c) {
      double o = 0.0;
      for (std::size_t t = 0; t < n; ++t) o += std::exp(scores[t] - m) / l * v.dequantized(g, t, c);
      out(i, c) = static_cast<float>(o);
    }
  }
  return out;
}

Tensor2 quantized_kv_attention_error_bound(const Tensor2& q, const QuantizedKv& k, const QuantizedKv& v,
                                           std::optional<double> scale) {
  const double s = validate_quantized_decode("quantized_kv_attention_error_bound", q, k, v, scale);
  const std::size_t num_heads = q.shape()[0], d = k.head_dim, n = k.seq, group = num_heads / k.heads;
  Tensor2 bound = Tensor2::from_shape({num_heads, d});
  for (std::size_t i = 0; i < num_heads; ++i) {
    const std::size_t g = i / group;
    // eps_i = scale max_t sum_c |q_ic| delta^K_{tc}: the most any score can move
    double eps = 0.0;
    for (std::size_t t = 0; t < n; ++t) {
      double moved = 0.0;
      for (std::size_t c = 0; c < d; ++c) moved += std::fabs(double{q(i, c)}) * k.half_step(g, t, c);
      eps = std::max(eps, s * moved);
    }
    // 1 - e^{-2 eps} bounds the total variation of the weights
    const double weight_shift = -std::expm1(-2.0 * eps);
    for (std::size_t c = 0; c < d; ++c) {
      // max_t delta^V_tc + (1 - e^{-2 eps}) (max_t v^_tc - min_t v^_tc + 2 max_t delta^V_tc)
      double delta_v = 0.0, lo = HUGE_VAL, hi = -HUGE_VAL;
      for (std::size_t t = 0; t < n; ++t) {
        delta_v = std::max(delta_v, v.half_step(g, t, c));
        lo = std::min(lo, v.dequantized(g, t, c));
        hi = std::max(hi, v.dequantized(g, t, c));
      }
      const double b = delta_v + weight_shift * (hi - lo + 2.0 * delta_v);
      // Rounded up to float, so that the float bound is still a bound.
      float rounded = static_cast<float>(b);
      if (rounded < b) rounded = std::nextafter(rounded, std::numeric_limits<float>::infinity());
      bound(i, c) = rounded;
    }
  }
  return bound;
}

}  // namespace tvlab::ref
