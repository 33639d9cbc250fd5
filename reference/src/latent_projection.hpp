#pragma once
// Private to the chapter 05 references (mla.cpp, tpa.cpp): the projections and the causal attention
// over a KV cache that both write, as loops with double accumulation.

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/attention.hpp"

namespace tvlab::ref::detail {

// y = x W for rows of x `[n, a]` and W `[a, b]`: y_tc = sum_k x_tk W_kc, in double.
inline Tensor2 project(const Tensor2& x, const Tensor2& w) {
  const std::size_t n = x.shape()[0], a = x.shape()[1], b = w.shape()[1];
  Tensor2 y = Tensor2::from_shape({n, b});
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t c = 0; c < b; ++c) {
      double sum = 0.0;
      for (std::size_t k = 0; k < a; ++k) sum += static_cast<double>(x(t, k)) * w(k, c);
      y(t, c) = static_cast<float>(sum);
    }
  return y;
}

// The columns [i w, (i+1) w) of y `[n, parts * w]` as part i: `[parts, n, w]` (heads, or ranks).
inline Tensor3 split_columns(const Tensor2& y, std::size_t parts) {
  const std::size_t n = y.shape()[0], width = y.shape()[1] / parts;
  Tensor3 out = Tensor3::from_shape({parts, n, width});
  for (std::size_t i = 0; i < parts; ++i)
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t e = 0; e < width; ++e) out(i, t, e) = y(t, i * width + e);
  return out;
}

// u_t = W^O [o_{t,1}; ...; o_{t,h}]: u_tc = sum_i sum_e o(i, t, e) W^O(i d_v + e, c).
inline Tensor2 output_projection(const Tensor3& o, const Tensor2& w_o) {
  const std::size_t heads = o.shape()[0], n = o.shape()[1], d_v = o.shape()[2], d = w_o.shape()[1];
  Tensor2 u = Tensor2::from_shape({n, d});
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t c = 0; c < d; ++c) {
      double sum = 0.0;
      for (std::size_t i = 0; i < heads; ++i)
        for (std::size_t e = 0; e < d_v; ++e) sum += static_cast<double>(o(i, t, e)) * w_o(i * d_v + e, c);
      u(t, c) = static_cast<float>(sum);
    }
  return u;
}

// Appends `extra` after `past` along the positions (axis 1 of [parts, seq, dim], axis 0 of [seq, dim]).
inline Tensor3 append_positions(const Tensor3& past, const Tensor3& extra) {
  return xt::concatenate(xt::xtuple(past, extra), 1);
}
inline Tensor2 append_positions(const Tensor2& past, const Tensor2& extra) {
  return xt::concatenate(xt::xtuple(past, extra), 0);
}

// Causal attention of the n new queries over all T cached positions (chapter 00's reference): query
// row i is position T - n + i and sees keys 0 .. T - n + i (the bottom-right alignment of a KV cache).
// Chapter 00 checks q and k once more (their scores must stay within float's range); its error is
// reported as the caller's, `fn`.
inline Tensor3 causal_attention(const char* fn, const Tensor3& q, const Tensor3& k, const Tensor3& v, double scale) {
  AttentionConfig cfg;
  cfg.scale = scale;
  cfg.mask.causal = true;
  cfg.mask.causal_align = CausalAlign::bottom_right;
  try {
    return scaled_dot_product_attention(q, k, v, cfg);
  } catch (const Error& e) {
    fail(fn, "x gives queries and keys whose attention is undefined: ", e.what());
  }
}

}  // namespace tvlab::ref::detail
