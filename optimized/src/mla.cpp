#include "tvlab/opt/mla.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "detail/append_positions.hpp"
#include "detail/blas.hpp"
#include "detail/head_projections.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/opt/gqa_decode.hpp"
#include "tvlab/opt/mla_decode.hpp"
#include "tvlab/opt/normalization.hpp"
#include "tvlab/opt/rope.hpp"

namespace tvlab::opt {
namespace {

std::size_t size(int value) { return static_cast<std::size_t>(value); }

// y = x W for x `[n, a]` and W `[a, b]`: one SGEMM.
Tensor2 times(const Tensor2& x, const Tensor2& w) {
  const std::size_t n = x.shape()[0], a = x.shape()[1], b = w.shape()[1];
  Tensor2 y = Tensor2::from_shape({n, b});
  detail::sgemm(n, b, a, 1.0f, x.data(), a, w.data(), b, false, 0.0f, y.data(), b);
  return y;
}

// Row t of every head of x `[heads, n, w]`, as the rows of one matrix `[heads, w]`: the new token
// t's queries, as a decode step takes them.
Tensor2 token_of_every_head(const Tensor3& x, std::size_t t) {
  const std::size_t heads = x.shape()[0], n = x.shape()[1], width = x.shape()[2];
  Tensor2 rows = Tensor2::from_shape({heads, width});
  for (std::size_t i = 0; i < heads; ++i) std::copy_n(x.data() + (i * n + t) * width, width, rows.data() + i * width);
  return rows;
}

// The decode step's errors come from its inputs, which x produced: reported as the layer's, with
// what they mean here (`meaning`) before the step's own message.
template <class Step>
auto attend(const char* fn, const char* meaning, const Step& step) {
  try {
    return step();
  } catch (const Error& e) {
    fail(fn, "x gives queries and keys whose attention is undefined: ", meaning, e.what());
  }
}

// mla_project's work on checked inputs (the layers check once, not once per stage).
MlaProjections project_checked(const Tensor2& x, const MlaWeights& w, const MlaConfig& cfg, long long first_position) {
  const std::size_t heads = size(cfg.num_heads), d_h = size(cfg.qk_nope_head_dim), d_r = size(cfg.qk_rope_head_dim);
  const std::size_t n = x.shape()[0];
  const RopeFrequencies freqs = rope_frequencies(mla_rope_config(cfg));
  std::uint64_t macs = 0;  // not reported, as in the reference
  // c^Q_t = RMSNorm(W^DQ h_t), or h_t itself without query compression
  const Tensor2 c_q = cfg.q_lora_rank ? rms_norm(times(x, w.w_dq), w.q_norm, cfg.rms_norm_eps) : x;
  MlaProjections p;
  // q^C_t = W^UQ c^Q_t and q^R_t = RoPE_t(W^QR c^Q_t), split into heads
  p.q_nope = detail::project_to_heads(c_q, 0, w.w_uq, heads, d_h, macs);
  p.q_rope =
      apply_rope(detail::project_to_heads(c_q, 0, w.w_qr, heads, d_r, macs), freqs, cfg.rope_layout, first_position);
  // c^KV_t = RMSNorm(W^DKV h_t)
  p.latents = rms_norm(times(x, w.w_dkv), w.kv_norm, cfg.rms_norm_eps);
  // k^R_t = RoPE_t(W^KR h_t), as one head for RoPE, then its rows
  const Tensor3 k_rope =
      apply_rope(detail::project_to_heads(x, 0, w.w_kr, 1, d_r, macs), freqs, cfg.rope_layout, first_position);
  p.rope_keys = Tensor2::from_shape({n, d_r});
  std::copy_n(k_rope.data(), n * d_r, p.rope_keys.data());
  return p;
}

}  // namespace

MlaProjections mla_project(const Tensor2& x, const MlaWeights& w, const MlaConfig& cfg, long long first_position) {
  const char* fn = "mla_project";
  ref::validate_mla_inputs(fn, x, w, cfg);
  require(first_position >= 0, fn, "first_position (", first_position, ") must be >= 0");
  return project_checked(x, w, cfg, first_position);
}

Tensor2 mla_naive(const Tensor2& x, const MlaWeights& w, const MlaConfig& cfg, MlaCache& cache) {
  const char* fn = "mla_naive";
  ref::validate_mla_inputs(fn, x, w, cfg);
  ref::validate_mla_cache(fn, cache, cfg, MlaPath::naive);
  const std::size_t heads = size(cfg.num_heads), n = x.shape()[0], past = cache.tokens();
  const std::size_t d_h = size(cfg.qk_nope_head_dim), d_r = size(cfg.qk_rope_head_dim);
  const MlaProjections p = project_checked(x, w, cfg, static_cast<long long>(past));
  std::uint64_t macs = 0;

  // k^C_{t,i} = W^UK_i c^KV_t and v^C_{t,i} = W^UV_i c^KV_t: two SGEMMs for all heads
  const Tensor3 k_nope = detail::project_to_heads(p.latents, 0, w.w_uk, heads, d_h, macs);
  const Tensor3 v_new = detail::project_to_heads(p.latents, 0, w.w_uv, heads, size(cfg.v_head_dim), macs);
  // q_{t,i} = [q^C_{t,i}; q^R_{t,i}] and k_{t,i} = [k^C_{t,i}; k^R_t]
  Tensor3 q = Tensor3::from_shape({heads, n, d_h + d_r});
  Tensor3 k_new = Tensor3::from_shape({heads, n, d_h + d_r});
  for (std::size_t i = 0; i < heads; ++i)
    for (std::size_t t = 0; t < n; ++t) {
      float* q_row = q.data() + (i * n + t) * (d_h + d_r);
      float* k_row = k_new.data() + (i * n + t) * (d_h + d_r);
      std::copy_n(p.q_nope.data() + (i * n + t) * d_h, d_h, q_row);
      std::copy_n(p.q_rope.data() + (i * n + t) * d_r, d_r, q_row + d_h);
      std::copy_n(k_nope.data() + (i * n + t) * d_h, d_h, k_row);
      std::copy_n(p.rope_keys.data() + t * d_r, d_r, k_row + d_h);
    }
  // A finite x can project beyond float's range; the cache takes only finite keys and values.
  require(std::isfinite(max_abs_or_inf(k_new.data(), k_new.size())) &&
              std::isfinite(max_abs_or_inf(v_new.data(), v_new.size())),
          fn, "x gives keys or values too large for float (beyond 3.4e38)");
  const Tensor3 keys = detail::append_positions(cache.keys, k_new);
  const Tensor3 values = detail::append_positions(cache.values, v_new);
  // New token t sits at position past + t and sees the first past + t + 1 positions: one decode
  // step of multi-head attention (g = h) over the expanded cache, chapter 05's kernel.
  Tensor3 o = Tensor3::from_shape({heads, n, size(cfg.v_head_dim)});
  for (std::size_t t = 0; t < n; ++t) {
    // The new keys and values are finite (checked above), and so are the cached ones: a step that
    // fails here has formed a score beyond float's range.
    const GqaDecodeOutput step = attend(fn, "its scores are too large for float (beyond 3.4e38). ", [&] {
      return gqa_decode_attention(token_of_every_head(q, t), keys, values, past + t + 1, mla_softmax_scale(cfg));
    });
    for (std::size_t i = 0; i < heads; ++i)
      std::copy_n(step.out.data() + i * o.shape()[2], o.shape()[2], o.data() + (i * n + t) * o.shape()[2]);
  }
  Tensor2 u = detail::project_from_heads(o, w.w_o, macs);
  // Nothing above changed the cache: it grows only once everything has succeeded.
  cache.keys = keys;
  cache.values = values;
  return u;
}

Tensor2 mla_absorbed(const Tensor2& x, const MlaWeights& w, const MlaConfig& cfg, MlaCache& cache) {
  const char* fn = "mla_absorbed";
  ref::validate_mla_inputs(fn, x, w, cfg);
  ref::validate_mla_cache(fn, cache, cfg, MlaPath::absorbed);
  const std::size_t heads = size(cfg.num_heads), n = x.shape()[0], past = cache.tokens();
  const std::size_t d_h = size(cfg.qk_nope_head_dim), d_r = size(cfg.qk_rope_head_dim);
  const std::size_t d_c = size(cfg.kv_lora_rank), d_v = size(cfg.v_head_dim);
  const MlaProjections p = project_checked(x, w, cfg, static_cast<long long>(past));

  // The absorbed query [q~_{t,i}; q^R_{t,i}], q~_{t,i} = W^UK_i^T q^C_{t,i}: per head one SGEMM
  // of q^C_i `[n, d_h]` with the transpose of W^UK's columns of head i `[d_c, d_h]`.
  Tensor3 q = Tensor3::from_shape({heads, n, d_c + d_r});
  std::vector<float> absorbed(n * d_c);
  for (std::size_t i = 0; i < heads; ++i) {
    detail::sgemm(n, d_c, d_h, 1.0f, p.q_nope.data() + i * n * d_h, d_h, w.w_uk.data() + i * d_h, heads * d_h, true,
                  0.0f, absorbed.data(), d_c);
    for (std::size_t t = 0; t < n; ++t) {
      float* row = q.data() + (i * n + t) * (d_c + d_r);
      std::copy_n(absorbed.data() + t * d_c, d_c, row);
      std::copy_n(p.q_rope.data() + (i * n + t) * d_r, d_r, row + d_c);
    }
  }
  const Tensor2 latents = detail::append_positions(cache.latents, p.latents);
  const Tensor2 rope_keys = detail::append_positions(cache.rope_keys, p.rope_keys);
  // a_{t,i} = sum_{j <= past + t} p_{tij} c^KV_j: new token t's absorbed decode step, which reads
  // each cached row once for all heads.
  Tensor3 averaged = Tensor3::from_shape({heads, n, d_c});
  for (std::size_t t = 0; t < n; ++t) {
    const MlaDecodeAttention step = attend(fn, "", [&] {
      return mla_absorbed_decode_attention(token_of_every_head(q, t), latents, rope_keys, past + t + 1,
                                           mla_softmax_scale(cfg));
    });
    for (std::size_t i = 0; i < heads; ++i)
      std::copy_n(step.out_latent.data() + i * d_c, d_c, averaged.data() + (i * n + t) * d_c);
  }
  // o_{t,i} = W^UV_i a_{t,i}: per head one SGEMM of a_i `[n, d_c]` with W^UV's columns of head i
  Tensor3 o = Tensor3::from_shape({heads, n, d_v});
  for (std::size_t i = 0; i < heads; ++i)
    detail::sgemm(n, d_v, d_c, 1.0f, averaged.data() + i * n * d_c, d_c, w.w_uv.data() + i * d_v, heads * d_v, false,
                  0.0f, o.data() + i * n * d_v, d_v);
  std::uint64_t macs = 0;
  Tensor2 u = detail::project_from_heads(o, w.w_o, macs);
  cache.latents = latents;
  cache.rope_keys = rope_keys;
  return u;
}

Tensor2 absorbed_qk_matrix(const MlaWeights& w, const MlaConfig& cfg, int head) {
  ref::validate_absorbed_qk_matrix("absorbed_qk_matrix", w, cfg, head);
  const std::size_t q_in = w.w_uq.shape()[0], d_c = size(cfg.kv_lora_rank), d_h = size(cfg.qk_nope_head_dim);
  const std::size_t stride = size(cfg.num_heads) * d_h, first = size(head) * d_h;
  // M = W^UQ_i (W^UK_i)^T: [q_in, d_h] times the transpose of [d_c, d_h], both column blocks of head i
  Tensor2 m = Tensor2::from_shape({q_in, d_c});
  detail::sgemm(q_in, d_c, d_h, 1.0f, w.w_uq.data() + first, stride, w.w_uk.data() + first, stride, true, 0.0f,
                m.data(), d_c);
  return m;
}

}  // namespace tvlab::opt
