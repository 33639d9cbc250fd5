#include "tvlab/ref/sparse_attention.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"

namespace tvlab::ref {
namespace {

// Attention of query row i of head h over the key list keys[0 .. count): the scores, their
// maximum, the normalised weights and the weighted sum of the values, all in double. Writes
// the output row and its log-sum-exp; a row with no key gives 0 and -inf.
void attend_row(const Tensor3& q, const Tensor3& k, const Tensor3& v, double scale, std::size_t h, std::size_t i,
                const std::uint32_t* keys, std::size_t count, FlashOutput& result) {
  const std::size_t d = q.shape()[2], d_v = v.shape()[2];
  if (count == 0) {
    for (std::size_t c = 0; c < d_v; ++c) result.out(h, i, c) = 0.0f;
    result.lse(h, i) = -std::numeric_limits<float>::infinity();
    return;
  }
  // s_j = scale * q_i . k_j for j in S_i, and m = max_j s_j
  std::vector<double> s(count);
  double m = -std::numeric_limits<double>::infinity();
  for (std::size_t e = 0; e < count; ++e) {
    double dot = 0.0;
    for (std::size_t c = 0; c < d; ++c) dot += double{q(h, i, c)} * double{k(h, keys[e], c)};
    s[e] = scale * dot;
    m = std::max(m, s[e]);
  }
  // l = sum_j e^{s_j - m};  o_i = sum_j (e^{s_j - m} / l) v_j;  lse = m + ln l
  double l = 0.0;
  for (std::size_t e = 0; e < count; ++e) l += std::exp(s[e] - m);
  for (std::size_t c = 0; c < d_v; ++c) {
    double o = 0.0;
    for (std::size_t e = 0; e < count; ++e) o += std::exp(s[e] - m) / l * double{v(h, keys[e], c)};
    result.out(h, i, c) = static_cast<float>(o);
  }
  result.lse(h, i) = static_cast<float>(m + std::log(l));
}

FlashOutput empty_output(const Tensor3& q, const Tensor3& v) {
  return FlashOutput{Tensor3::from_shape({q.shape()[0], q.shape()[1], v.shape()[2]}),
                     Tensor2::from_shape({q.shape()[0], q.shape()[1]}), 0, 0};
}

}  // namespace

FlashOutput sparse_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const HeadPatterns& patterns,
                             std::optional<double> scale) {
  const char* fn = "sparse_attention";
  const double s = validate_sparse_attention(fn, q, k, v, scale);
  const std::size_t heads = q.shape()[0], seq_q = q.shape()[1];
  validate_head_patterns(fn, "patterns", patterns, heads, seq_q, k.shape()[1]);
  FlashOutput result = empty_output(q, v);
  for (std::size_t h = 0; h < heads; ++h) {
    const SparsePattern& p = pattern_of_head(patterns, h);
    for (std::size_t i = 0; i < seq_q; ++i)
      attend_row(q, k, v, s, h, i, p.keys.data() + p.row_start[i], p.row_size(i), result);
  }
  return result;
}

FlashOutput block_sparse_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const HeadLayouts& layouts,
                                   std::optional<double> scale) {
  const char* fn = "block_sparse_attention";
  const double s = validate_sparse_attention(fn, q, k, v, scale);
  const std::size_t heads = q.shape()[0], seq_q = q.shape()[1], seq_k = k.shape()[1];
  validate_head_layouts(fn, "layouts", layouts, heads, seq_q, seq_k);
  HeadPatterns patterns;
  for (const BlockLayout& layout : layouts) patterns.push_back(to_pattern(layout));
  FlashOutput result = sparse_attention(q, k, v, patterns, s);
  // The tiles a block-sparse kernel computes (the listed blocks) and skips (the rest of the grid).
  for (std::size_t h = 0; h < heads; ++h) {
    const BlockLayout& layout = layout_of_head(layouts, h);
    result.tiles_computed += layout.blocks();
    result.tiles_skipped += layout.query_blocks() * layout.key_block_count() - layout.blocks();
  }
  return result;
}

FlashOutput sliding_window_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, SlidingWindow window,
                                     std::optional<double> scale) {
  const char* fn = "sliding_window_attention";
  const double s = validate_sparse_attention(fn, q, k, v, scale);
  const std::size_t heads = q.shape()[0], seq_q = q.shape()[1], seq_k = k.shape()[1];
  validate_sliding_window(fn, window, seq_q, seq_k);
  const AttentionMask mask{.window = window};
  FlashOutput result = empty_output(q, v);
  std::vector<std::uint32_t> keys;
  for (std::size_t i = 0; i < seq_q; ++i) {
    // S_i = [i' - w_l, i' + w_r] within [0, n_k), i' = i + n_k - n_q
    const IndexRange range = mask.key_range(i, seq_q, seq_k);
    keys.clear();
    for (std::size_t j = range.begin; j < range.end; ++j) keys.push_back(static_cast<std::uint32_t>(j));
    for (std::size_t h = 0; h < heads; ++h) attend_row(q, k, v, s, h, i, keys.data(), keys.size(), result);
  }
  return result;
}

}  // namespace tvlab::ref
