#include "tvlab/opt/kv_cache.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/opt/gqa_decode.hpp"
#include "tvlab/opt/rope.hpp"
#include "tvlab/opt/softmax.hpp"

#include "detail/blas.hpp"
#include "detail/head_projections.hpp"

namespace tvlab::opt {
namespace {

// The largest |key| among positions [0, n) of keys [g, capacity, d_k] (a parallel max).
double max_abs_key(const Tensor3& keys, std::size_t n) {
  const std::size_t g = keys.shape()[0], capacity = keys.shape()[1], d = keys.shape()[2];
  float largest = 0.0f;
  for (std::size_t j = 0; j < g; ++j) {
    const float* head = keys.data() + j * capacity * d;
#pragma omp parallel for simd reduction(max : largest) schedule(static)
    for (std::size_t e = 0; e < n * d; ++e) largest = std::max(largest, std::fabs(head[e]));
  }
  return largest;
}

// Causal grouped attention of t queries q [h, t, d_k] (query r at position n - t + r) over the
// first n positions of keys, values [g, capacity, d_k], head by head: query head i reads kv head
// i / (h/g) in place. Per head, S = scale Q K^T [t, n] (SGEMM), each row r kept to its key range
// [0, n - t + r] (the rest is never read: the softmax and P V run on the row's first keys only),
// the softmax, then O = P V (SGEMM).
Tensor3 grouped_causal_attention(const Tensor3& q, const Tensor3& keys, const Tensor3& values, std::size_t n,
                                 float scale) {
  const std::size_t h = q.shape()[0], t = q.shape()[1], d = q.shape()[2];
  const std::size_t g = keys.shape()[0], capacity = keys.shape()[1], group = h / g;
  Tensor3 out = Tensor3::from_shape({h, t, d});
  const int threads = static_cast<int>(std::min<std::size_t>(h, static_cast<std::size_t>(omp_get_max_threads())));
  const detail::SingleThreadedBlas single;  // the threads run heads: one BLAS thread each
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> scores(t * n);
#pragma omp for schedule(static)
    for (std::ptrdiff_t head = 0; head < static_cast<std::ptrdiff_t>(h); ++head) {
      const auto i = static_cast<std::size_t>(head);
      const float* k_head = keys.data() + (i / group) * capacity * d;
      const float* v_head = values.data() + (i / group) * capacity * d;
      const float* q_head = q.data() + i * t * d;
      float* o_head = out.data() + i * t * d;
      detail::sgemm(t, n, d, scale, q_head, d, k_head, d, true, 0.0f, scores.data(), n);
      for (std::size_t r = 0; r < t; ++r) {
        // Row r sees keys 0 .. n - t + r: the softmax over them, zeros after (P V then adds nothing).
        float* row = scores.data() + r * n;
        const std::size_t seen = n - t + r + 1;
        softmax_row_inplace(row, seen);
        std::fill(row + seen, row + n, 0.0f);
      }
      detail::sgemm(t, d, n, 1.0f, scores.data(), n, v_head, d, false, 0.0f, o_head, d);
    }
  }
  return out;
}

// Query and key rotated at their positions: new token i at p0 + n0 + i.
void rotate(Tensor3& q, Tensor3& k, const std::optional<AttentionRope>& rope, long long q_offset, long long k_offset) {
  if (!rope) return;
  q = apply_rope(q, rope->freqs, rope->layout, rope->first_position + q_offset);
  k = apply_rope(k, rope->freqs, rope->layout, rope->first_position + k_offset);
}

// scale |q . k| <= scale d_k max|q| max|k| must stay inside float's range (the reference's bound).
void require_scores_in_range(const char* fn, double scale, std::size_t head_dim, double q_max, double k_max) {
  const double score_bound = scale * static_cast<double>(head_dim) * q_max * k_max;
  require(score_bound <= 1e38, fn, "scores could reach ", score_bound, ", beyond float's range (3.4e38); scale x down");
}

DecodeOutput cached_step(const char* fn, KvCache& cache, const Tensor2& x, const GqaWeights& w, const KvHeads& heads,
                         const GqaShape& shape, const std::optional<AttentionRope>& rope) {
  const std::size_t h = static_cast<std::size_t>(heads.num_heads), g = static_cast<std::size_t>(heads.num_kv_heads);
  const std::size_t t = x.shape()[0], n0 = cache.length(), d_k = shape.head_dim;
  require(t <= cache.capacity() - n0, fn, t, " new tokens after the ", n0, " cached ones exceed the cache's capacity (",
          cache.capacity(), ")");
  if (rope) validate_attention_rope(fn, *rope, t, n0 + t, d_k);
  DecodeOutput result;
  Tensor3 q = detail::project_to_heads(x, 0, w.w_q, h, d_k, result.projection_macs);
  Tensor3 k = detail::project_to_heads(x, 0, w.w_k, g, d_k, result.projection_macs);
  const Tensor3 v = detail::project_to_heads(x, 0, w.w_v, g, d_k, result.projection_macs);
  rotate(q, k, rope, static_cast<long long>(n0), static_cast<long long>(n0));  // the key is cached rotated
  // Checked before the cache is written, over the cached keys and the new ones.
  const double scale = 1.0 / std::sqrt(static_cast<double>(d_k));
  const double q_max = require_finite_max_abs(fn, "x W_q (the new queries)", q);
  const double k_max = std::max<double>(require_finite_max_abs(fn, "x W_k (the new keys)", k),
                                        max_abs_key(cache.keys(), n0));
  require_finite_max_abs(fn, "x W_v (the new values)", v);
  require_scores_in_range(fn, scale, d_k, q_max, k_max);
  cache.append(k, v);
  const std::size_t n = cache.length();
  Tensor3 o;
  if (t == 1) {
    // One token: the split-K decode step, each kv head read once for its h/g query heads.
    const Tensor2 q_token = xt::view(q, xt::all(), 0, xt::all());
    const Tensor2 o_token = gqa_decode_attention(q_token, cache.keys(), cache.values(), n, scale).out;
    o = Tensor3::from_shape({h, 1, d_k});
    std::copy_n(o_token.data(), h * d_k, o.data());
  } else {
    o = grouped_causal_attention(q, cache.keys(), cache.values(), n, static_cast<float>(scale));
  }
  result.output = detail::project_from_heads(o, w.w_o, result.projection_macs);
  return result;
}

}  // namespace

DecodeOutput prefill(KvCache& cache, const Tensor2& x, const GqaWeights& w, const KvHeads& heads,
                     const std::optional<AttentionRope>& rope) {
  const GqaShape shape = ref::validate_cached_step("prefill", cache, x, "x", w, heads);
  return cached_step("prefill", cache, x, w, heads, shape, rope);
}

DecodeOutput decode(KvCache& cache, const Tensor2& x_token, const GqaWeights& w, const KvHeads& heads,
                    const std::optional<AttentionRope>& rope) {
  const GqaShape shape = ref::validate_cached_step("decode", cache, x_token, "x_token", w, heads);
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
  const std::size_t n = x.shape()[0], d_k = shape.head_dim;
  if (rope) validate_attention_rope(fn, *rope, 1, n, d_k);
  DecodeOutput result;
  // Every token's key and value again (nothing was kept), the query of the last token only.
  Tensor3 k = detail::project_to_heads(x, 0, w.w_k, g, d_k, result.projection_macs);
  const Tensor3 v = detail::project_to_heads(x, 0, w.w_v, g, d_k, result.projection_macs);
  Tensor3 q = detail::project_to_heads(x, n - 1, w.w_q, h, d_k, result.projection_macs);
  rotate(q, k, rope, static_cast<long long>(n - 1), 0);  // key p at p0 + p, the query at p0 + n - 1
  const double scale = 1.0 / std::sqrt(static_cast<double>(d_k));
  const double q_max = require_finite_max_abs(fn, "q", q), k_max = require_finite_max_abs(fn, "k", k);
  require_finite_max_abs(fn, "v", v);
  require_scores_in_range(fn, scale, d_k, q_max, k_max);
  // The last token sees all n positions: the causal rule keeps every key of its one row.
  const Tensor3 o = grouped_causal_attention(q, k, v, n, static_cast<float>(scale));
  result.output = detail::project_from_heads(o, w.w_o, result.projection_macs);
  return result;
}

}  // namespace tvlab::opt
