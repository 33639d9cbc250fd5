#include "tvlab/analysis/sparse_cost.hpp"

#include <algorithm>

#include "tvlab/core/error.hpp"

namespace tvlab::analysis {
namespace {

// T(m) = m (m + 1) / 2 for m > 0, else 0: 1 + 2 + ... + m.
double triangle(long long m) { return m > 0 ? static_cast<double>(m) * static_cast<double>(m + 1) / 2.0 : 0.0; }

// The causal pairs of a seq_q x seq_k matrix, bottom-right aligned: row i sees the keys
// j <= i + n_k - n_q, i + n_k - n_q + 1 of them (none while that is not positive), so the counts
// run up to n_k at the last row: T(n_k) - T(n_k - n_q).
double causal_pair_count(std::size_t seq_q, std::size_t seq_k) {
  return triangle(static_cast<long long>(seq_k)) -
         triangle(static_cast<long long>(seq_k) - static_cast<long long>(seq_q));
}

// Everything that follows from the pair counts.
SparseAttentionCost from_counts(std::size_t seq_q, std::size_t seq_k, std::size_t heads, std::size_t head_dim,
                                double pairs_per_head, std::size_t min_row, std::size_t max_row) {
  const double h = static_cast<double>(heads), d = static_cast<double>(head_dim);
  SparseAttentionCost c;
  c.seq_q = seq_q;
  c.seq_k = seq_k;
  c.heads = heads;
  c.head_dim = head_dim;
  c.attended_pairs = h * pairs_per_head;
  c.dense_pairs = h * static_cast<double>(seq_q) * static_cast<double>(seq_k);
  c.causal_pairs = h * causal_pair_count(seq_q, seq_k);
  c.min_row_keys = min_row;
  c.max_row_keys = max_row;
  c.mean_row_keys = seq_q == 0 ? 0.0 : pairs_per_head / static_cast<double>(seq_q);
  // Per pair: the score q_i . k_j (d multiply-adds) and p_ij v_j (d more), 2 FLOPs each.
  c.qk_flops = c.attended_pairs * 2.0 * d;
  c.pv_flops = c.attended_pairs * 2.0 * d;
  c.score_bytes = c.attended_pairs * 4.0;
  // Compressed rows: a uint32 key per pair, a size_t offset per row and one more.
  c.pattern_bytes = pairs_per_head * 4.0 + static_cast<double>(seq_q + 1) * 8.0;
  return c;
}

}  // namespace

SparseAttentionCost sparse_attention_cost(const SparsePattern& pattern, std::size_t heads, std::size_t head_dim) {
  const char* fn = "sparse_attention_cost";
  require_positive(fn, "heads", heads);
  require_positive(fn, "head_dim", head_dim);
  validate_pattern(fn, "pattern", pattern, pattern.seq_q, pattern.seq_k);
  std::size_t min_row = pattern.seq_q == 0 ? 0 : pattern.seq_k, max_row = 0;
  for (std::size_t i = 0; i < pattern.seq_q; ++i) {
    min_row = std::min(min_row, pattern.row_size(i));
    max_row = std::max(max_row, pattern.row_size(i));
  }
  return from_counts(pattern.seq_q, pattern.seq_k, heads, head_dim, static_cast<double>(pattern.pairs()), min_row,
                     max_row);
}

SparseAttentionCost sliding_window_cost(std::size_t n, long long left, long long right, std::size_t heads,
                                        std::size_t head_dim) {
  const char* fn = "sliding_window_cost";
  require_positive(fn, "n", n);
  require(left >= 0, fn, "left (", left, ") must be >= 0");
  require(right >= 0, fn, "right (", right, ") must be >= 0");
  require_positive(fn, "heads", heads);
  require_positive(fn, "head_dim", head_dim);
  const long long nn = static_cast<long long>(n);
  // Widths beyond the sequence change nothing: clip them to n (no overflow in w_l + w_r + 1).
  const long long w_l = std::min(left, nn), w_r = std::min(right, nn);
  // P = n^2 - T(n - 1 - w_r) - T(n - 1 - w_l): the two corner triangles the window cuts off
  const double pairs =
      static_cast<double>(n) * static_cast<double>(n) - triangle(nn - 1 - w_r) - triangle(nn - 1 - w_l);
  const auto max_row = static_cast<std::size_t>(std::min(nn, w_l + w_r + 1));
  const auto min_row = static_cast<std::size_t>(std::min(nn, std::min(w_l, w_r) + 1));
  return from_counts(n, n, heads, head_dim, pairs, min_row, max_row);
}

}  // namespace tvlab::analysis
