#include "tvlab/ref/paged_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"

namespace tvlab::ref {
namespace {

// The checks of q and the scale shared by both forms; returns the scale to use.
double validate_decode_query(const char* function, const Tensor2& q, const PagedKvCache& cache,
                             const std::optional<double>& scale) {
  const std::size_t num_heads = q.shape()[0], g = cache.num_kv_heads();
  require(num_heads > 0, function, "q has no head (shape ", shape_string_of(q), ")");
  require_dim(function, "q", q, 1, "head_dim", cache.head_dim(), "the cache's head_dim");
  require(num_heads % g == 0, function, "num_heads (", num_heads, ", the rows of q) must be a multiple of ",
          "num_kv_heads (", g, ", the cache's): each kv head serves h/g query heads");
  require_finite(function, "q", q);
  if (scale) {
    require(std::isfinite(*scale) && *scale > 0 && *scale <= std::numeric_limits<float>::max(), function, "scale (",
            *scale, ") must be positive and finite (representable in float)");
    return *scale;
  }
  return 1.0 / std::sqrt(static_cast<double>(cache.head_dim()));
}

}  // namespace

double validate_paged_decode(const char* function, const Tensor2& q, const PagedKvCache& cache,
                             std::span<const std::size_t> block_table, std::size_t context_len,
                             std::optional<double> scale) {
  const double s = validate_decode_query(function, q, cache, scale);
  cache.validate_block_table(function, "block_table", block_table, context_len);
  return s;
}

GqaDecodeOutput paged_decode_attention_with_lse(const Tensor2& q, const PagedKvCache& cache,
                                               std::span<const std::size_t> block_table, std::size_t context_len,
                                               std::optional<double> scale) {
  const char* fn = "paged_decode_attention";
  const double s = validate_paged_decode(fn, q, cache, block_table, context_len, scale);
  const std::size_t num_heads = q.shape()[0], d = cache.head_dim(), b = cache.block_size();
  const std::size_t group = num_heads / cache.num_kv_heads();
  GqaDecodeOutput result{Tensor2::from_shape({num_heads, d}), Tensor1::from_shape({num_heads})};
  std::vector<double> scores(context_len);
  for (std::size_t i = 0; i < num_heads; ++i) {
    const std::size_t kv_head = i / group;  // g(i) = floor(i / (h / g))
    // s_t = scale q_i . k^_{g(i), t}, token t in block T[t / b], slot t mod b; m = max_t s_t. Each
    // element is read as the pool stores it and dequantized on the spot (PagedKvCache::key_at).
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t t = 0; t < context_len; ++t) {
      const std::size_t block = block_table[t / b], slot = t % b;
      double dot = 0.0;
      for (std::size_t c = 0; c < d; ++c) dot += double{q(i, c)} * cache.key_at(block, kv_head, slot, c);
      scores[t] = s * dot;
      m = std::max(m, scores[t]);
    }
    // l = sum_t e^{s_t - m};  o_i = sum_t (e^{s_t - m} / l) v^_{g(i), t}
    double l = 0.0;
    for (std::size_t t = 0; t < context_len; ++t) l += std::exp(scores[t] - m);
    for (std::size_t c = 0; c < d; ++c) {
      double o = 0.0;
      for (std::size_t t = 0; t < context_len; ++t)
        o += std::exp(scores[t] - m) / l * cache.value_at(block_table[t / b], kv_head, t % b, c);
      result.out(i, c) = static_cast<float>(o);
    }
    result.lse(i) = static_cast<float>(m + std::log(l));  // L_i = m + ln l
  }
  require_finite_decode_output(fn, result);
  return result;
}

Tensor2 paged_decode_attention(const Tensor2& q, const PagedKvCache& cache, std::span<const std::size_t> block_table,
                               std::size_t context_len, std::optional<double> scale) {
  return paged_decode_attention_with_lse(q, cache, block_table, context_len, scale).out;
}

Tensor2 paged_decode_attention(const Tensor2& q, const PagedKvCache& cache, SequenceId seq,
                               std::optional<double> scale) {
  const char* fn = "paged_decode_attention";
  require(cache.has_sequence(seq), fn, "seq (", seq, ") is not a live sequence of the cache");
  require(cache.length(seq) > 0, fn, "seq (", seq, ") has no token yet: append its prompt first");
  validate_decode_query(fn, q, cache, scale);
  return paged_decode_attention(q, cache, cache.block_table(seq), cache.length(seq), scale);
}

Tensor3 paged_decode_attention(const Tensor3& q, const PagedKvCache& cache, std::span<const SequenceId> seqs,
                               std::optional<double> scale) {
  const char* fn = "paged_decode_attention";
  require(q.shape()[0] == seqs.size(), fn, "q has ", q.shape()[0], " rows (sequences), seqs has ", seqs.size(),
          " entries: one query row per sequence");
  for (std::size_t r = 0; r < seqs.size(); ++r) {
    require(cache.has_sequence(seqs[r]), fn, "seqs[", r, "] (", seqs[r], ") is not a live sequence of the cache");
    require(cache.length(seqs[r]) > 0, fn, "seqs[", r, "] (", seqs[r], ") has no token yet: append its prompt first");
  }
  Tensor3 out = Tensor3::from_shape({q.shape()[0], q.shape()[1], cache.head_dim()});
  for (std::size_t r = 0; r < seqs.size(); ++r) {
    const Tensor2 q_r = xt::view(q, r);
    xt::view(out, r) = paged_decode_attention(q_r, cache, seqs[r], scale);
  }
  return out;
}

}  // namespace tvlab::ref
