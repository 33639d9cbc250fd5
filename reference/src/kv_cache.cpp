#include "tvlab/ref/kv_cache.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "gqa_detail.hpp"
#include "tvlab/core/attention_mask.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/ref/gqa_attention.hpp"
#include "tvlab/ref/rope.hpp"

namespace tvlab::ref {

KvCache::KvCache(const KvHeads& heads, std::size_t head_dim, std::size_t capacity) : heads_(heads) {
  const char* fn = "KvCache";
  validate_kv_heads(fn, heads);
  require_positive(fn, "head_dim", head_dim);
  require_positive(fn, "capacity", capacity);
  const std::size_t g = static_cast<std::size_t>(heads.num_kv_heads);
  checked_element_count(fn, {g, capacity, head_dim});
  head_dim_ = head_dim;
  capacity_ = capacity;
  // NaN in the free slots: reading one would poison the output instead of passing unnoticed.
  keys_ = Tensor3::from_shape({g, capacity, head_dim});
  keys_.fill(std::numeric_limits<float>::quiet_NaN());
  values_ = keys_;
}

void KvCache::append(const Tensor3& k, const Tensor3& v) {
  const char* fn = "KvCache::append";
  const std::size_t g = static_cast<std::size_t>(heads_.num_kv_heads);
  require_dim(fn, "k", k, 0, "heads", g, "the cache's num_kv_heads");
  require_dim(fn, "k", k, 2, "head_dim", head_dim_, "the cache's head_dim");
  require_dim(fn, "v", v, 0, "heads", g, "the cache's num_kv_heads");
  require_dim(fn, "v", v, 1, "seq", k.shape()[1], "the new positions of k");
  require_dim(fn, "v", v, 2, "head_dim", head_dim_, "the cache's head_dim");
  const std::size_t t = k.shape()[1];
  require(t <= capacity_ - length_, fn, t, " new positions after the ", length_, " cached ones exceed the capacity (",
          capacity_, ")");
  require_finite(fn, "k", k);
  require_finite(fn, "v", v);
  // Every check above passed: only now is the cache written (nothing below throws).
  for (std::size_t j = 0; j < g; ++j)
    for (std::size_t i = 0; i < t; ++i)
      for (std::size_t d = 0; d < head_dim_; ++d) {
        keys_(j, length_ + i, d) = k(j, i, d);
        values_(j, length_ + i, d) = v(j, i, d);
      }
  length_ += t;
}

void KvCache::clear() {
  keys_.fill(std::numeric_limits<float>::quiet_NaN());
  values_.fill(std::numeric_limits<float>::quiet_NaN());
  length_ = 0;
}

namespace {

DecodeOutput cached_step(const char* fn, KvCache& cache, const Tensor2& x, const GqaWeights& w, const KvHeads& heads,
                         const GqaShape& shape, const std::optional<AttentionRope>& rope) {
  const std::size_t h = static_cast<std::size_t>(heads.num_heads), g = static_cast<std::size_t>(heads.num_kv_heads);
  const std::size_t t = x.shape()[0], n0 = cache.length();
  require(t <= cache.capacity() - n0, fn, t, " new tokens after the ", n0, " cached ones exceed the cache's capacity (",
          cache.capacity(), ")");
  if (rope) validate_attention_rope(fn, *rope, t, n0 + t, shape.head_dim);
  DecodeOutput result;
  // The new tokens' projections: t (h + 2g) d_k dot products of length d.
  Tensor3 q = detail::project_to_heads(x, 0, w.w_q, h, shape.head_dim, result.projection_macs);
  Tensor3 k = detail::project_to_heads(x, 0, w.w_k, g, shape.head_dim, result.projection_macs);
  const Tensor3 v = detail::project_to_heads(x, 0, w.w_v, g, shape.head_dim, result.projection_macs);
  if (rope) {
    // New token i sits at position p0 + n0 + i: its query and key are rotated there, and the key
    // is cached rotated (chapter 02's apply_rope).
    q = apply_rope(q, rope->freqs, rope->layout, rope->first_position + static_cast<long long>(n0));
    k = apply_rope(k, rope->freqs, rope->layout, rope->first_position + static_cast<long long>(n0));
  }
  // Query i sits at position n0 + i of the n0 + t keys: the causal mask aligned bottom-right.
  AttentionMask causal;
  causal.causal = true;
  causal.causal_align = CausalAlign::bottom_right;
  // The projections of finite inputs can still overflow float; and as in chapter 00
  // (validate_attention), scale * |q . k| <= scale d_k max|q| max|k| must stay inside float's range,
  // max|k| over the cached keys and the new ones. Checked before the cache is written.
  const double scale = 1.0 / std::sqrt(static_cast<double>(shape.head_dim));
  const double q_max = require_finite_max_abs(fn, "x W_q (the new queries)", q);
  double k_max = require_finite_max_abs(fn, "x W_k (the new keys)", k);
  require_finite_max_abs(fn, "x W_v (the new values)", v);
  for (std::size_t j = 0; j < g; ++j)
    for (std::size_t p = 0; p < n0; ++p)
      for (std::size_t d = 0; d < shape.head_dim; ++d) k_max = std::max(k_max, std::fabs(double{cache.keys()(j, p, d)}));
  const double score_bound = scale * static_cast<double>(shape.head_dim) * q_max * k_max;
  require(score_bound <= 1e38, fn, "scores could reach ", score_bound, ", beyond float's range (3.4e38); scale x down");
  cache.append(k, v);
  // Attention over the n0 + t cached positions, read in place.
  const Tensor3 o = detail::grouped_attention(q, cache.keys(), cache.values(), cache.length(), scale, causal);
  result.output = detail::project_from_heads(o, w.w_o, result.projection_macs);
  return result;
}

}  // namespace

GqaShape validate_cached_step(const char* fn, const KvCache& cache, const Tensor2& x, const char* x_name,
                       const GqaWeights& w, const KvHeads& heads) {
  const GqaShape shape = validate_gqa_weights(fn, w, heads);
  require(cache.heads().num_heads == heads.num_heads && cache.heads().num_kv_heads == heads.num_kv_heads, fn,
          "cache has num_heads ", cache.heads().num_heads, " and num_kv_heads ", cache.heads().num_kv_heads,
          ", expected those of heads (", heads.num_heads, " and ", heads.num_kv_heads, ")");
  require(cache.head_dim() == shape.head_dim, fn, "cache has head_dim ", cache.head_dim(),
          ", expected that of the weights (", shape.head_dim, ")");
  require_layer_tokens(fn, x_name, x, shape);
  return shape;
}

DecodeOutput prefill(KvCache& cache, const Tensor2& x, const GqaWeights& w, const KvHeads& heads,
                     const std::optional<AttentionRope>& rope) {
  const GqaShape shape = validate_cached_step("prefill", cache, x, "x", w, heads);
  return cached_step("prefill", cache, x, w, heads, shape, rope);
}

DecodeOutput decode(KvCache& cache, const Tensor2& x_token, const GqaWeights& w, const KvHeads& heads,
                    const std::optional<AttentionRope>& rope) {
  const GqaShape shape = validate_cached_step("decode", cache, x_token, "x_token", w, heads);
  require(x_token.shape()[0] == 1, "decode", "x_token has ", x_token.shape()[0],
          " rows, expected 1 (one new token; use prefill for several)");
  return cached_step("decode", cache, x_token, w, heads, shape, rope);
}

DecodeOutput decode_without_cache(const Tensor2& x, const GqaWeights& w, const KvHeads& heads,
                                  const std::optional<AttentionRope>& rope) {
  const char* fn = "decode_without_cache";
  const GqaShape shape = validate_gqa_weights(fn, w, heads);
  require_layer_tokens(fn, "x", x, shape);
  const std::size_t h = static_cast<std::size_t>(heads.num_heads), g = static_cast<std::size_t>(heads.num_kv_heads);
  const std::size_t n = x.shape()[0];
  if (rope) validate_attention_rope(fn, *rope, 1, n, shape.head_dim);
  DecodeOutput result;
  // Every token's key and value again (nothing was kept), the query of the last token only.
  Tensor3 k = detail::project_to_heads(x, 0, w.w_k, g, shape.head_dim, result.projection_macs);
  const Tensor3 v = detail::project_to_heads(x, 0, w.w_v, g, shape.head_dim, result.projection_macs);
  Tensor3 q = detail::project_to_heads(x, n - 1, w.w_q, h, shape.head_dim, result.projection_macs);
  if (rope) {  // key p at p0 + p, the query at p0 + n - 1
    k = apply_rope(k, rope->freqs, rope->layout, rope->first_position);
    q = apply_rope(q, rope->freqs, rope->layout, rope->first_position + static_cast<long long>(n - 1));
  }
  // The last token sees all n positions: no mask needed.
  const AttentionMask none;
  const double scale = validate_grouped_attention(fn, q, k, v, n, std::nullopt, none);
  const Tensor3 o = detail::grouped_attention(q, k, v, n, scale, none);
  result.output = detail::project_from_heads(o, w.w_o, result.projection_macs);
  return result;
}

}  // namespace tvlab::ref
