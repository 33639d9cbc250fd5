#include "tvlab/core/mla_config.hpp"

#include <cmath>
#include <string_view>

#include "tvlab/core/error.hpp"
#include "tvlab/core/model_config.hpp"

namespace tvlab {
namespace {

// The layer's view of a named DeepSeek model: the published sizes are written once, in the named
// models of model_config.cpp (each with its config.json); RMSNorm's epsilon and RoPE's base as in
// those files.
MlaConfig deepseek_mla(const char* name) {
  const ModelConfig& m = named_model_config(name);
  MlaConfig cfg;
  cfg.hidden_size = static_cast<int>(m.hidden_size);
  cfg.num_heads = static_cast<int>(m.num_attention_heads);
  if (m.q_lora_rank > 0) cfg.q_lora_rank = static_cast<int>(m.q_lora_rank);  // 0: queries not compressed
  cfg.kv_lora_rank = static_cast<int>(m.kv_lora_rank);
  cfg.qk_nope_head_dim = static_cast<int>(m.qk_nope_head_dim);
  cfg.qk_rope_head_dim = static_cast<int>(m.qk_rope_head_dim);
  cfg.v_head_dim = static_cast<int>(m.v_head_dim);
  cfg.num_hidden_layers = static_cast<int>(m.num_hidden_layers);
  cfg.rms_norm_eps = 1e-6;
  cfg.rope_theta = 10000.0;
  return cfg;
}

std::size_t size(int value) { return static_cast<std::size_t>(value); }

void require_matrix(const char* fn, std::string_view name, const Tensor2& w, std::size_t rows,
                    std::string_view rows_why, std::size_t cols, std::string_view cols_why) {
  require_dim(fn, name, w, 0, "rows", rows, rows_why);
  require_dim(fn, name, w, 1, "columns", cols, cols_why);
  require_finite_max_abs(fn, name, w);  // one fast pass over a large weight
}

void require_gain(const char* fn, std::string_view name, const Tensor1& gain, std::size_t length,
                  std::string_view why) {
  require_dim(fn, name, gain, 0, "length", length, why);
  require_finite_max_abs(fn, name, gain);
}

}  // namespace

MlaConfig deepseek_v2_mla() { return deepseek_mla("deepseek-v2"); }
MlaConfig deepseek_v2_lite_mla() { return deepseek_mla("deepseek-v2-lite"); }
MlaConfig deepseek_v3_mla() { return deepseek_mla("deepseek-v3"); }

void validate_mla_config(const char* function, const MlaConfig& cfg) {
  require_positive(function, "hidden_size", cfg.hidden_size);
  require_positive(function, "num_heads", cfg.num_heads);
  if (cfg.q_lora_rank) require_positive(function, "q_lora_rank", *cfg.q_lora_rank);
  require_positive(function, "kv_lora_rank", cfg.kv_lora_rank);
  require_positive(function, "qk_nope_head_dim", cfg.qk_nope_head_dim);
  require_positive(function, "qk_rope_head_dim", cfg.qk_rope_head_dim);
  require(cfg.qk_rope_head_dim % 2 == 0, function, "qk_rope_head_dim (", cfg.qk_rope_head_dim,
          ") must be even: RoPE rotates pairs of coordinates");
  require_positive(function, "v_head_dim", cfg.v_head_dim);
  require_positive(function, "num_hidden_layers", cfg.num_hidden_layers);
  require(std::isfinite(cfg.rms_norm_eps) && cfg.rms_norm_eps >= 0.0, function, "rms_norm_eps (", cfg.rms_norm_eps,
          ") must be finite and >= 0");
  require(std::isfinite(cfg.rope_theta) && cfg.rope_theta > 1.0, function, "rope_theta (", cfg.rope_theta,
          ") must be finite and > 1");
}

RopeConfig mla_rope_config(const MlaConfig& cfg) {
  validate_mla_config("mla_rope_config", cfg);
  RopeConfig rope;
  rope.head_dim = cfg.qk_rope_head_dim;
  rope.rope_theta = cfg.rope_theta;
  return rope;
}

double mla_softmax_scale(const MlaConfig& cfg) {
  validate_mla_config("mla_softmax_scale", cfg);
  // 1 / sqrt(d_h + d_h^R)
  return 1.0 / std::sqrt(static_cast<double>(cfg.qk_nope_head_dim + cfg.qk_rope_head_dim));
}

void validate_mla_weights(const char* fn, const MlaWeights& w, const MlaConfig& cfg) {
  validate_mla_config(fn, cfg);
  const std::size_t d = size(cfg.hidden_size), heads = size(cfg.num_heads), d_c = size(cfg.kv_lora_rank);
  const std::size_t d_h = size(cfg.qk_nope_head_dim), d_r = size(cfg.qk_rope_head_dim), d_v = size(cfg.v_head_dim);
  std::size_t q_in = d;
  std::string_view q_in_why = "hidden_size: no query compression";
  if (cfg.q_lora_rank) {
    const std::size_t d_cq = size(*cfg.q_lora_rank);
    require_matrix(fn, "w_dq", w.w_dq, d, "hidden_size", d_cq, "q_lora_rank");
    require_gain(fn, "q_norm", w.q_norm, d_cq, "q_lora_rank");
    q_in = d_cq;
    q_in_why = "q_lora_rank";
  } else {
    require(w.w_dq.size() == 0 && w.q_norm.size() == 0, fn,
            "w_dq and q_norm must be empty when q_lora_rank is absent (queries come from the hidden state)");
  }
  require_matrix(fn, "w_uq", w.w_uq, q_in, q_in_why, heads * d_h, "num_heads * qk_nope_head_dim");
  require_matrix(fn, "w_qr", w.w_qr, q_in, q_in_why, heads * d_r, "num_heads * qk_rope_head_dim");
  require_matrix(fn, "w_dkv", w.w_dkv, d, "hidden_size", d_c, "kv_lora_rank");
  require_gain(fn, "kv_norm", w.kv_norm, d_c, "kv_lora_rank");
  require_matrix(fn, "w_kr", w.w_kr, d, "hidden_size", d_r, "qk_rope_head_dim");
  require_matrix(fn, "w_uk", w.w_uk, d_c, "kv_lora_rank", heads * d_h, "num_heads * qk_nope_head_dim");
  require_matrix(fn, "w_uv", w.w_uv, d_c, "kv_lora_rank", heads * d_v, "num_heads * v_head_dim");
  require_matrix(fn, "w_o", w.w_o, heads * d_v, "num_heads * v_head_dim", d, "hidden_size");
}

std::string to_string(MlaPath path) { return path == MlaPath::naive ? "naive" : "absorbed"; }

MlaCache::MlaCache(const MlaConfig& cfg, MlaPath cache_path) : path(cache_path) {
  validate_mla_config("MlaCache", cfg);
  const std::size_t heads = size(cfg.num_heads), d_r = size(cfg.qk_rope_head_dim);
  if (path == MlaPath::naive) {
    keys = Tensor3::from_shape({heads, 0, size(cfg.qk_nope_head_dim) + d_r});
    values = Tensor3::from_shape({heads, 0, size(cfg.v_head_dim)});
    latents = Tensor2::from_shape({0, 0});
    rope_keys = Tensor2::from_shape({0, 0});
  } else {
    keys = Tensor3::from_shape({0, 0, 0});
    values = Tensor3::from_shape({0, 0, 0});
    latents = Tensor2::from_shape({0, size(cfg.kv_lora_rank)});
    rope_keys = Tensor2::from_shape({0, d_r});
  }
}

std::size_t MlaCache::tokens() const { return path == MlaPath::naive ? keys.shape()[1] : latents.shape()[0]; }

std::size_t MlaCache::floats() const { return keys.size() + values.size() + latents.size() + rope_keys.size(); }

std::size_t mla_cache_floats_per_token(const MlaConfig& cfg, MlaPath path) {
  validate_mla_config("mla_cache_floats_per_token", cfg);
  const std::size_t heads = size(cfg.num_heads);
  if (path == MlaPath::naive) {
    // n_h (d_h + d_h^R) for the keys + n_h d_v for the values
    // (summed as size_t: the int sum could overflow)
    return heads * (size(cfg.qk_nope_head_dim) + size(cfg.qk_rope_head_dim)) + heads * size(cfg.v_head_dim);
  }
  // d_c + d_h^R: the latent and the one RoPE key every head shares. (The KV-memory calculator,
  // analysis::mla_kv_elements_per_token, counts the same; the tests hold both to this closed form.)
  return size(cfg.kv_lora_rank) + size(cfg.qk_rope_head_dim);
}

double mla_cache_bytes_per_token(const MlaConfig& cfg, MlaPath path, double bytes_per_element) {
  const char* fn = "mla_cache_bytes_per_token";
  require(std::isfinite(bytes_per_element) && bytes_per_element > 0.0, fn, "bytes_per_element (", bytes_per_element,
          ") must be positive and finite");
  validate_mla_config(fn, cfg);
  return static_cast<double>(mla_cache_floats_per_token(cfg, path)) * bytes_per_element;
}

}  // namespace tvlab
