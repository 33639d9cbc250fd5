#include "tvlab/core/tpa_config.hpp"

#include <cmath>
#include <string>

#include "tvlab/core/error.hpp"

namespace tvlab {
namespace {

std::size_t size(int value) { return static_cast<std::size_t>(value); }

// One factor map of rank `rank` ("q", "k" or "v"): w_b, and either w_a or the fixed a.
void validate_factor_map(const char* fn, const std::string& name, const TpaFactorMap& map, int rank,
                         const std::string& rank_name, const TpaConfig& cfg) {
  const std::size_t d = size(cfg.hidden_size), h = size(cfg.num_heads), d_h = size(cfg.head_dim), r = size(rank);
  const std::string w_a = name + ".w_a", a = name + ".a", w_b = name + ".w_b";
  if (map.w_a.size() != 0) {
    require(map.a.size() == 0, fn, w_a, " and ", a, " are both given: the head factors are either contextual (w_a) or fixed (a)");
    require_dim(fn, w_a, map.w_a, 0, "rows", d, "hidden_size");
    require_dim(fn, w_a, map.w_a, 1, "columns", r * h, rank_name + " * num_heads");
    require_finite_max_abs(fn, w_a, map.w_a);
  } else {
    require(map.a.size() != 0, fn, "neither ", w_a, " nor ", a, " is given: the head factors need one of them");
    require_dim(fn, a, map.a, 0, "rows", r, rank_name);
    require_dim(fn, a, map.a, 1, "columns", h, "num_heads");
    require_finite(fn, a, map.a);
  }
  require_dim(fn, w_b, map.w_b, 0, "rows", d, "hidden_size");
  require_dim(fn, w_b, map.w_b, 1, "columns", r * d_h, rank_name + " * head_dim");
  require_finite_max_abs(fn, w_b, map.w_b);
}

}  // namespace

void validate_tpa_config(const char* function, const TpaConfig& cfg) {
  require_positive(function, "hidden_size", cfg.hidden_size);
  require_positive(function, "num_heads", cfg.num_heads);
  require_positive(function, "head_dim", cfg.head_dim);
  require(cfg.head_dim % 2 == 0, function, "head_dim (", cfg.head_dim, ") must be even: RoPE rotates pairs of coordinates");
  require_positive(function, "q_rank", cfg.q_rank);
  require_positive(function, "k_rank", cfg.k_rank);
  require_positive(function, "v_rank", cfg.v_rank);
  require(std::isfinite(cfg.rope_theta) && cfg.rope_theta > 1.0, function, "rope_theta (", cfg.rope_theta,
          ") must be finite and > 1");
}

void validate_tpa_weights(const char* fn, const TpaWeights& w, const TpaConfig& cfg) {
  validate_tpa_config(fn, cfg);
  validate_factor_map(fn, "q", w.q, cfg.q_rank, "q_rank", cfg);
  validate_factor_map(fn, "k", w.k, cfg.k_rank, "k_rank", cfg);
  validate_factor_map(fn, "v", w.v, cfg.v_rank, "v_rank", cfg);
  require_dim(fn, "w_o", w.w_o, 0, "rows", size(cfg.num_heads) * size(cfg.head_dim), "num_heads * head_dim");
  require_dim(fn, "w_o", w.w_o, 1, "columns", size(cfg.hidden_size), "hidden_size");
  require_finite_max_abs(fn, "w_o", w.w_o);
}

TpaCache::TpaCache(const TpaConfig& cfg) {
  validate_tpa_config("TpaCache", cfg);
  const std::size_t h = size(cfg.num_heads), d_h = size(cfg.head_dim);
  a_k = Tensor3::from_shape({size(cfg.k_rank), 0, h});
  b_k = Tensor3::from_shape({size(cfg.k_rank), 0, d_h});
  a_v = Tensor3::from_shape({size(cfg.v_rank), 0, h});
  b_v = Tensor3::from_shape({size(cfg.v_rank), 0, d_h});
}

std::size_t TpaCache::tokens() const { return b_k.shape()[1]; }

std::size_t TpaCache::floats() const { return a_k.size() + b_k.size() + a_v.size() + b_v.size(); }

std::size_t tpa_cache_floats_per_token(const TpaConfig& cfg) {
  validate_tpa_config("tpa_cache_floats_per_token", cfg);
  // (R_K + R_V)(h + d_h): for every rank, one head factor and one token factor (summed as size_t:
  // the int sums could overflow; each factor stays below 2^32, so the product fits)
  return (size(cfg.k_rank) + size(cfg.v_rank)) * (size(cfg.num_heads) + size(cfg.head_dim));
}

}  // namespace tvlab
