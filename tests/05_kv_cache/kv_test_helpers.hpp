#pragma once
// What several of chapter 05's tests share: the grouped heads spelled out, rows of a matrix, a
// random GQA layer, and RoPE in double precision, each written from its definition, sharing no
// code with the reference it checks; and two inputs and tools of the tests: the RoPE a layer is
// given (chapter 02's frequencies) and the message of an error.

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "tvlab/core/error.hpp"

#include "tvlab/core/kv_heads.hpp"
#include "tvlab/core/mla_config.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/core/rope_config.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/core/xt.hpp"
#include "tvlab/ref/rope.hpp"

namespace tvlab::ch05_testing {

/// The keys (or values) `[g, n, d]` of g kv heads repeated for h = `num_heads` query heads, `[h, n, d]`:
/// query head i reads kv head \f$ \lfloor i / (h/g) \rfloor \f$ (GQA, Ainslie et al. 2023; Hugging
/// Face's `repeat_kv`), so that chapter 00's oracle, which pairs head i with head i, computes grouped
/// attention.
inline Tensor3 expand_heads(const Tensor3& kv, std::size_t num_heads) {
  const std::size_t g = kv.shape()[0], group = num_heads / g;
  Tensor3 out = Tensor3::from_shape({num_heads, kv.shape()[1], kv.shape()[2]});
  for (std::size_t i = 0; i < num_heads; ++i)
    for (std::size_t t = 0; t < kv.shape()[1]; ++t)
      for (std::size_t d = 0; d < kv.shape()[2]; ++d) out(i, t, d) = kv(i / group, t, d);
  return out;
}

/// Rows `[begin, end)` of x.
inline Tensor2 rows(const Tensor2& x, std::size_t begin, std::size_t end) {
  return xt::view(x, xt::range(begin, end), xt::all());
}
inline DTensor2 rows(const DTensor2& x, std::size_t begin, std::size_t end) {
  return xt::view(x, xt::range(begin, end), xt::all());
}

/// A GQA layer's four projections, entries \f$ \mathcal{N}(0, 1/d) \f$ so that outputs stay of order 1.
inline GqaWeights random_gqa_weights(Rng& rng, std::size_t d_model, KvHeads heads, std::size_t head_dim) {
  const std::size_t h = static_cast<std::size_t>(heads.num_heads), g = static_cast<std::size_t>(heads.num_kv_heads);
  const double w_std = 1.0 / std::sqrt(static_cast<double>(d_model));
  return {rng.normal_matrix(d_model, h * head_dim, 0, w_std), rng.normal_matrix(d_model, g * head_dim, 0, w_std),
          rng.normal_matrix(d_model, g * head_dim, 0, w_std), rng.normal_matrix(h * head_dim, d_model, 0, w_std)};
}

using DVector = std::vector<double>;

/// RoPE at position m in double precision: pair p turns by \f$ m\,\theta^{-2p/d} \f$; the pairs are
/// (2p, 2p+1) (interleaved) or (p, p + d/2) (half split).
inline DVector rotate(const DVector& x, double m, double theta, RopeLayout layout) {
  const std::size_t d = x.size();
  DVector y = x;
  for (std::size_t p = 0; p < d / 2; ++p) {
    const std::size_t a = layout == RopeLayout::interleaved ? 2 * p : p;
    const std::size_t b = layout == RopeLayout::interleaved ? 2 * p + 1 : p + d / 2;
    const double angle = m * std::pow(theta, -2.0 * static_cast<double>(p) / static_cast<double>(d));
    y[a] = x[a] * std::cos(angle) - x[b] * std::sin(angle);
    y[b] = x[a] * std::sin(angle) + x[b] * std::cos(angle);
  }
  return y;
}

// MLA weights of N(0, 1/fan_in) (the projections keep the scale of their input) and RMSNorm gains
// around 1; W^DQ and its norm only when the config compresses the query.
inline MlaWeights random_mla_weights(const MlaConfig& cfg, Rng& rng) {
  const std::size_t d = cfg.hidden_size, h = cfg.num_heads, d_c = cfg.kv_lora_rank;
  const std::size_t d_h = cfg.qk_nope_head_dim, d_r = cfg.qk_rope_head_dim, d_v = cfg.v_head_dim;
  auto matrix = [&](std::size_t rows, std::size_t cols) {
    return rng.normal_matrix(rows, cols, 0.0, 1.0 / std::sqrt(static_cast<double>(rows)));
  };
  MlaWeights w;
  std::size_t q_in = d;
  if (cfg.q_lora_rank) {
    q_in = static_cast<std::size_t>(*cfg.q_lora_rank);
    w.w_dq = matrix(d, q_in);
    w.q_norm = rng.normal_vector(q_in, 1.0, 0.2);
  }
  w.w_uq = matrix(q_in, h * d_h);
  w.w_qr = matrix(q_in, h * d_r);
  w.w_dkv = matrix(d, d_c);
  w.kv_norm = rng.normal_vector(d_c, 1.0, 0.2);
  w.w_kr = matrix(d, d_r);
  w.w_uk = matrix(d_c, h * d_h);
  w.w_uv = matrix(d_c, h * d_v);
  w.w_o = matrix(h * d_v, d);
  return w;
}

/// Chapter 02's RoPE for head_dim d_k (Llama's half-split pairs), key 0 at position p0, with a small
/// base (theta = 100) so that even the slow pairs turn visibly over a few positions.
inline AttentionRope rope_for(std::size_t d_k, long long p0) {
  RopeConfig cfg;
  cfg.head_dim = static_cast<int>(d_k);
  cfg.rope_theta = 100.0;
  return {ref::rope_frequencies(cfg), RopeLayout::half_split, p0};
}

/// The message of `call`'s tvlab::Error ("" when it throws none).
template <class F>
std::string error_of(F&& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace tvlab::ch05_testing
