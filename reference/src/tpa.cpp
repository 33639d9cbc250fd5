#include "tvlab/ref/tpa.hpp"

#include <cmath>

#include "latent_projection.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/ref/rope.hpp"

namespace tvlab::ref {
namespace {

std::size_t size(int value) { return static_cast<std::size_t>(value); }

struct Factors {
  Tensor3 a;  // [R, n, h]
  Tensor3 b;  // [R, n, d_h]
};

// The factors of the n tokens of x for one of Q, K, V: b_r(x_t) = W^b_r x_t, and a_r(x_t) = W^a_r x_t
// or the fixed a_r for every token.
Factors factors(const Tensor2& x, const TpaFactorMap& map, int rank, int heads) {
  const std::size_t r = size(rank), n = x.shape()[0], h = size(heads);
  Factors f;
  f.b = detail::split_columns(detail::project(x, map.w_b), r);
  if (map.w_a.size() != 0) {
    f.a = detail::split_columns(detail::project(x, map.w_a), r);
  } else {
    f.a = Tensor3::from_shape({r, n, h});
    for (std::size_t k = 0; k < r; ++k)
      for (std::size_t t = 0; t < n; ++t)
        for (std::size_t i = 0; i < h; ++i) f.a(k, t, i) = map.a(k, i);
  }
  return f;
}

void validate_cache_shapes(const char* fn, const TpaCache& cache, const TpaConfig& cfg) {
  const std::size_t h = size(cfg.num_heads), d_h = size(cfg.head_dim), tokens = cache.b_k.shape()[1];
  require_dim(fn, "cache.a_k", cache.a_k, 0, "ranks", size(cfg.k_rank), "k_rank");
  require_dim(fn, "cache.a_k", cache.a_k, 1, "tokens", tokens, "the tokens of cache.b_k");
  require_dim(fn, "cache.a_k", cache.a_k, 2, "columns", h, "num_heads");
  require_dim(fn, "cache.b_k", cache.b_k, 0, "ranks", size(cfg.k_rank), "k_rank");
  require_dim(fn, "cache.b_k", cache.b_k, 2, "columns", d_h, "head_dim");
  require_dim(fn, "cache.a_v", cache.a_v, 0, "ranks", size(cfg.v_rank), "v_rank");
  require_dim(fn, "cache.a_v", cache.a_v, 1, "tokens", tokens, "the tokens of cache.b_k");
  require_dim(fn, "cache.a_v", cache.a_v, 2, "columns", h, "num_heads");
  require_dim(fn, "cache.b_v", cache.b_v, 0, "ranks", size(cfg.v_rank), "v_rank");
  require_dim(fn, "cache.b_v", cache.b_v, 1, "tokens", tokens, "the tokens of cache.b_k");
  require_dim(fn, "cache.b_v", cache.b_v, 2, "columns", d_h, "head_dim");
}

}  // namespace

void validate_tpa_call(const char* fn, const Tensor2& x, const TpaWeights& w, const TpaConfig& cfg,
                       const TpaCache& cache) {
  validate_tpa_weights(fn, w, cfg);
  require_nonempty(fn, "x", x);
  require_dim(fn, "x", x, 1, "columns", size(cfg.hidden_size), "hidden_size");
  require_finite(fn, "x", x);
  validate_cache_shapes(fn, cache, cfg);
}

void validate_tpa_factors(const char* fn, const Tensor3& a, const Tensor3& b) {
  require_nonempty(fn, "a", a);
  require_nonempty(fn, "b", b);
  require_dim(fn, "b", b, 0, "ranks", a.shape()[0], "the ranks of a");
  require_dim(fn, "b", b, 1, "tokens", a.shape()[1], "the tokens of a");
  require_finite(fn, "a", a);
  require_finite(fn, "b", b);
}

Tensor3 tpa_assemble(const Tensor3& a, const Tensor3& b) {
  validate_tpa_factors("tpa_assemble", a, b);
  const std::size_t rank = a.shape()[0], n = a.shape()[1], h = a.shape()[2], d_h = b.shape()[2];
  Tensor3 x = Tensor3::from_shape({h, n, d_h});
  // X_{t,i,e} = (1/R) sum_r a_r(x_t)_i b_r(x_t)_e
  for (std::size_t i = 0; i < h; ++i)
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t e = 0; e < d_h; ++e) {
        double sum = 0.0;
        for (std::size_t r = 0; r < rank; ++r) sum += static_cast<double>(a(r, t, i)) * b(r, t, e);
        x(i, t, e) = static_cast<float>(sum / static_cast<double>(rank));
      }
  return x;
}

Tensor2 tensor_product_attention(const Tensor2& x, const TpaWeights& w, const TpaConfig& cfg, TpaCache& cache) {
  const char* fn = "tensor_product_attention";
  validate_tpa_call(fn, x, w, cfg, cache);
  const long long first_position = static_cast<long long>(cache.tokens());
  RopeConfig rope;
  rope.head_dim = cfg.head_dim;
  rope.rope_theta = cfg.rope_theta;
  const RopeFrequencies freqs = rope_frequencies(rope);

  Factors q = factors(x, w.q, cfg.q_rank, cfg.num_heads);
  Factors k = factors(x, w.k, cfg.k_rank, cfg.num_heads);
  const Factors v = factors(x, w.v, cfg.v_rank, cfg.num_heads);
  // RoPE_t on every token factor b^Q_r(x_t), b^K_r(x_t) (the ranks stand where apply_rope takes heads)
  q.b = apply_rope(q.b, freqs, cfg.rope_layout, first_position);
  k.b = apply_rope(k.b, freqs, cfg.rope_layout, first_position);
  // the cache of factors, with the new tokens' appended (committed only at the end)
  const Tensor3 a_k = detail::append_positions(cache.a_k, k.a), b_k = detail::append_positions(cache.b_k, k.b);
  const Tensor3 a_v = detail::append_positions(cache.a_v, v.a), b_v = detail::append_positions(cache.b_v, v.b);
  // Q_t, K_t, V_t = (1/R) sum_r a_r (x) b_r, over the new queries and every cached position
  const Tensor3 queries = tpa_assemble(q.a, q.b), keys = tpa_assemble(a_k, b_k), values = tpa_assemble(a_v, b_v);
  // head_i = softmax(Q_i K_i^T / sqrt(d_h)) V_i, causal over the cache
  const Tensor3 o = detail::causal_attention(fn, queries, keys, values, 1.0 / std::sqrt(static_cast<double>(cfg.head_dim)));
  Tensor2 u = detail::output_projection(o, w.w_o);
  cache.a_k = a_k;
  cache.b_k = b_k;
  cache.a_v = a_v;
  cache.b_v = b_v;
  return u;
}

}  // namespace tvlab::ref
