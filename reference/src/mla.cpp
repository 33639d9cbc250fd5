#include "tvlab/ref/mla.hpp"

#include <string>

#include "latent_projection.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/ref/normalization.hpp"
#include "tvlab/ref/rope.hpp"

namespace tvlab::ref {
namespace {

using detail::append_positions;
using detail::causal_attention;
using detail::output_projection;
using detail::project;

std::size_t size(int value) { return static_cast<std::size_t>(value); }

// The rows of `rows` `[n, w]` as one head `[1, n, w]` (chapter 02's RoPE takes [heads, seq, dim]).
Tensor3 as_one_head(const Tensor2& rows) {
  Tensor3 out = Tensor3::from_shape({1, rows.shape()[0], rows.shape()[1]});
  for (std::size_t t = 0; t < rows.shape()[0]; ++t)
    for (std::size_t e = 0; e < rows.shape()[1]; ++e) out(0, t, e) = rows(t, e);
  return out;
}

}  // namespace

void validate_mla_inputs(const char* fn, const Tensor2& x, const MlaWeights& w, const MlaConfig& cfg) {
  validate_mla_weights(fn, w, cfg);
  require_nonempty(fn, "x", x);
  require_dim(fn, "x", x, 1, "columns", size(cfg.hidden_size), "hidden_size");
  require_finite(fn, "x", x);
}

void validate_mla_cache(const char* fn, const MlaCache& cache, const MlaConfig& cfg, MlaPath path) {
  require(cache.path == path, fn, "cache is a ", to_string(cache.path), " cache, expected a ", to_string(path),
          " one (MlaCache(cfg, MlaPath::", to_string(path), "))");
  const std::size_t heads = size(cfg.num_heads), d_r = size(cfg.qk_rope_head_dim);
  if (path == MlaPath::naive) {
    require_dim(fn, "cache.keys", cache.keys, 0, "heads", heads, "num_heads");
    require_dim(fn, "cache.keys", cache.keys, 2, "head_dim", size(cfg.qk_nope_head_dim) + d_r,
                "qk_nope_head_dim + qk_rope_head_dim");
    require_dim(fn, "cache.values", cache.values, 0, "heads", heads, "num_heads");
    require_dim(fn, "cache.values", cache.values, 1, "seq", cache.keys.shape()[1], "the seq of cache.keys");
    require_dim(fn, "cache.values", cache.values, 2, "head_dim", size(cfg.v_head_dim), "v_head_dim");
  } else {
    require_dim(fn, "cache.latents", cache.latents, 1, "columns", size(cfg.kv_lora_rank), "kv_lora_rank");
    require_dim(fn, "cache.rope_keys", cache.rope_keys, 0, "rows", cache.latents.shape()[0],
                "the rows of cache.latents");
    require_dim(fn, "cache.rope_keys", cache.rope_keys, 1, "columns", d_r, "qk_rope_head_dim");
  }
}

MlaProjections mla_project(const Tensor2& x, const MlaWeights& w, const MlaConfig& cfg, long long first_position) {
  const char* fn = "mla_project";
  validate_mla_inputs(fn, x, w, cfg);
  require(first_position >= 0, fn, "first_position (", first_position, ") must be >= 0");
  const std::size_t heads = size(cfg.num_heads);
  const RopeFrequencies freqs = rope_frequencies(mla_rope_config(cfg));

  // c^Q_t = RMSNorm(W^DQ h_t), or h_t itself without query compression
  const Tensor2 c_q = cfg.q_lora_rank ? rms_norm(project(x, w.w_dq), w.q_norm, cfg.rms_norm_eps) : x;
  MlaProjections p;
  // q^C_t = W^UQ c^Q_t, head i in columns [i d_h, (i+1) d_h)
  p.q_nope = detail::split_columns(project(c_q, w.w_uq), heads);
  // q^R_t = RoPE_t(W^QR c^Q_t), one rotated query part per head
  p.q_rope = apply_rope(detail::split_columns(project(c_q, w.w_qr), heads), freqs, cfg.rope_layout, first_position);
  // c^KV_t = RMSNorm(W^DKV h_t): the latent every head's key and value are rebuilt from
  p.latents = rms_norm(project(x, w.w_dkv), w.kv_norm, cfg.rms_norm_eps);
  // k^R_t = RoPE_t(W^KR h_t): from the hidden state, one vector shared by all heads
  const Tensor3 k_rope = apply_rope(as_one_head(project(x, w.w_kr)), freqs, cfg.rope_layout, first_position);
  p.rope_keys = xt::view(k_rope, 0, xt::all(), xt::all());
  return p;
}

Tensor2 mla_naive(const Tensor2& x, const MlaWeights& w, const MlaConfig& cfg, MlaCache& cache) {
  const char* fn = "mla_naive";
  validate_mla_inputs(fn, x, w, cfg);
  validate_mla_cache(fn, cache, cfg, MlaPath::naive);
  const std::size_t heads = size(cfg.num_heads), n = x.shape()[0];
  const std::size_t d_h = size(cfg.qk_nope_head_dim), d_r = size(cfg.qk_rope_head_dim);
  const MlaProjections p = mla_project(x, w, cfg, static_cast<long long>(cache.tokens()));

  // k^C_{t,i} = W^UK_i c^KV_t and v^C_{t,i} = W^UV_i c^KV_t: every head's key and value, expanded
  const Tensor3 k_nope = detail::split_columns(project(p.latents, w.w_uk), heads);
  const Tensor3 v_new = detail::split_columns(project(p.latents, w.w_uv), heads);
  // q_{t,i} = [q^C_{t,i}; q^R_{t,i}] and k_{t,i} = [k^C_{t,i}; k^R_t] (k^R_t copied into every head)
  Tensor3 q = Tensor3::from_shape({heads, n, d_h + d_r});
  Tensor3 k_new = Tensor3::from_shape({heads, n, d_h + d_r});
  for (std::size_t i = 0; i < heads; ++i)
    for (std::size_t t = 0; t < n; ++t) {
      for (std::size_t e = 0; e < d_h; ++e) {
        q(i, t, e) = p.q_nope(i, t, e);
        k_new(i, t, e) = k_nope(i, t, e);
      }
      for (std::size_t e = 0; e < d_r; ++e) {
        q(i, t, d_h + e) = p.q_rope(i, t, e);
        k_new(i, t, d_h + e) = p.rope_keys(t, e);
      }
    }
  const Tensor3 keys = append_positions(cache.keys, k_new), values = append_positions(cache.values, v_new);
  // o_{t,i} = sum_{j <= t} softmax_j(q_{t,i} . k_{j,i} / sqrt(d_h + d_h^R)) v^C_{j,i}  (chapter 00's attention)
  const Tensor3 o = causal_attention(fn, q, keys, values, mla_softmax_scale(cfg));
  Tensor2 u = output_projection(o, w.w_o);
  // Nothing above changed the cache: it grows only once everything has succeeded.
  cache.keys = keys;
  cache.values = values;
  return u;
}

Tensor2 mla_absorbed(const Tensor2& x, const MlaWeights& w, const MlaConfig& cfg, MlaCache& cache) {
  const char* fn = "mla_absorbed";
  validate_mla_inputs(fn, x, w, cfg);
  validate_mla_cache(fn, cache, cfg, MlaPath::absorbed);
  const std::size_t heads = size(cfg.num_heads), n = x.shape()[0];
  const std::size_t d_h = size(cfg.qk_nope_head_dim), d_r = size(cfg.qk_rope_head_dim);
  const std::size_t d_c = size(cfg.kv_lora_rank), d_v = size(cfg.v_head_dim);
  const MlaProjections p = mla_project(x, w, cfg, static_cast<long long>(cache.tokens()));

  // The absorbed query [q~_{t,i}; q^R_{t,i}] with q~_{t,i} = W^UK_i^T q^C_{t,i}:
  // q~(i, t, c) = sum_e q^C(i, t, e) W^UK(c, i d_h + e)
  Tensor3 q = Tensor3::from_shape({heads, n, d_c + d_r});
  for (std::size_t i = 0; i < heads; ++i)
    for (std::size_t t = 0; t < n; ++t) {
      for (std::size_t c = 0; c < d_c; ++c) {
        double sum = 0.0;
        for (std::size_t e = 0; e < d_h; ++e) sum += static_cast<double>(p.q_nope(i, t, e)) * w.w_uk(c, i * d_h + e);
        q(i, t, c) = static_cast<float>(sum);
      }
      for (std::size_t e = 0; e < d_r; ++e) q(i, t, d_c + e) = p.q_rope(i, t, e);
    }
  const Tensor2 latents = append_positions(cache.latents, p.latents);
  const Tensor2 rope_keys = append_positions(cache.rope_keys, p.rope_keys);
  const std::size_t tokens = latents.shape()[0];
  // One key [c^KV_j; k^R_j] and one value c^KV_j for every head: multi-query attention over the cache
  // (given to chapter 00's attention head by head, as it takes [heads, seq, dim]).
  Tensor3 k = Tensor3::from_shape({heads, tokens, d_c + d_r});
  Tensor3 v = Tensor3::from_shape({heads, tokens, d_c});
  for (std::size_t i = 0; i < heads; ++i)
    for (std::size_t j = 0; j < tokens; ++j) {
      for (std::size_t c = 0; c < d_c; ++c) k(i, j, c) = v(i, j, c) = latents(j, c);
      for (std::size_t e = 0; e < d_r; ++e) k(i, j, d_c + e) = rope_keys(j, e);
    }
  // a_{t,i} = sum_{j <= t} p_{tij} c^KV_j: the attention-weighted latent, scale 1/sqrt(d_h + d_h^R)
  const Tensor3 averaged = causal_attention(fn, q, k, v, mla_softmax_scale(cfg));
  // o_{t,i} = W^UV_i a_{t,i}: o(i, t, e) = sum_c a(i, t, c) W^UV(c, i d_v + e)
  Tensor3 o = Tensor3::from_shape({heads, n, d_v});
  for (std::size_t i = 0; i < heads; ++i)
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t e = 0; e < d_v; ++e) {
        double sum = 0.0;
        for (std::size_t c = 0; c < d_c; ++c) sum += static_cast<double>(averaged(i, t, c)) * w.w_uv(c, i * d_v + e);
        o(i, t, e) = static_cast<float>(sum);
      }
  Tensor2 u = output_projection(o, w.w_o);
  cache.latents = latents;
  cache.rope_keys = rope_keys;
  return u;
}

void validate_absorbed_qk_matrix(const char* fn, const MlaWeights& w, const MlaConfig& cfg, int head) {
  validate_mla_weights(fn, w, cfg);
  require(head >= 0 && head < cfg.num_heads, fn, "head (", head, ") must be in [0, num_heads = ", cfg.num_heads, ")");
}

Tensor2 absorbed_qk_matrix(const MlaWeights& w, const MlaConfig& cfg, int head) {
  validate_absorbed_qk_matrix("absorbed_qk_matrix", w, cfg, head);
  const std::size_t q_in = w.w_uq.shape()[0], d_c = size(cfg.kv_lora_rank), d_h = size(cfg.qk_nope_head_dim);
  const std::size_t first = size(head) * d_h;
  // M_ac = sum_e W^UQ(a, i d_h + e) W^UK(c, i d_h + e)
  Tensor2 m = Tensor2::from_shape({q_in, d_c});
  for (std::size_t a = 0; a < q_in; ++a)
    for (std::size_t c = 0; c < d_c; ++c) {
      double sum = 0.0;
      for (std::size_t e = 0; e < d_h; ++e) sum += static_cast<double>(w.w_uq(a, first + e)) * w.w_uk(c, first + e);
      m(a, c) = static_cast<float>(sum);
    }
  return m;
}

}  // namespace tvlab::ref
