#pragma once
/// @file
/// Chapter 03: what a sparse pattern saves against dense attention. Attention spends its work on
/// (query, key) pairs: each attended pair costs one score \f$ q_i \cdot k_j \f$ (\f$ d \f$
/// multiply-adds = \f$ 2d \f$ FLOPs), one exponential, and one weighted value
/// \f$ p_{ij} v_j \f$ (\f$ 2d \f$ FLOPs); a score matrix kept in memory holds one number per pair.
/// So FLOPs and score bytes both scale with the number of attended pairs
/// \f$ P = \sum_i |S_i| \f$, and the savings against dense attention (\f$ n_q n_k \f$ pairs) are the same
/// ratio for both, \f$ n_q n_k / P \f$. (The documents' "compute 16x less, storage 8x less" for one
/// window cannot both hold: see chapter 03's errata.)
/// @ingroup ch03

#include <cstddef>

#include "tvlab/core/sparse_pattern.hpp"

namespace tvlab::analysis {

/// The cost of attention over a pattern for `heads` heads of width `head_dim` (the same pattern
/// in every head; one sequence), next to dense attention over all \f$ n_q n_k \f$ pairs and
/// causal dense attention (the \f$ j \le i' \f$ pairs, \f$ i' = i + n_k - n_q \f$ as chapter 00
/// aligns it bottom-right).
struct SparseAttentionCost {
  std::size_t seq_q = 0, seq_k = 0, heads = 0, head_dim = 0;
  double attended_pairs = 0;  ///< \f$ h \sum_i |S_i| \f$
  double dense_pairs = 0;     ///< \f$ h\, n_q n_k \f$
  double causal_pairs = 0;    ///< \f$ h \sum_i \min(n_k, i' + 1) \f$
  std::size_t min_row_keys = 0, max_row_keys = 0;  ///< \f$ \min_i |S_i| \f$, \f$ \max_i |S_i| \f$
  double mean_row_keys = 0;                        ///< \f$ \sum_i |S_i| / n_q \f$
  double qk_flops = 0;     ///< \f$ S = QK^\top \f$ on the attended pairs: \f$ 2 d \f$ per pair
  double pv_flops = 0;     ///< \f$ O = PV \f$ on the attended pairs: \f$ 2 d \f$ per pair (\f$ d_v = d \f$)
  double score_bytes = 0;  ///< the attended scores stored as float32: 4 bytes per pair
  /// The pattern itself as compressed rows (`SparsePattern`: a 4-byte key per pair and an 8-byte
  /// offset per row, once for all heads): what materialising an unstructured pattern costs on top.
  double pattern_bytes = 0;

  double flops() const { return qk_flops + pv_flops; }
  double dense_flops() const { return dense_pairs * 4.0 * static_cast<double>(head_dim); }
  double dense_score_bytes() const { return dense_pairs * 4.0; }
  /// \f$ P / (n_q n_k) \f$: the fraction of the dense matrix that is computed.
  double density() const { return attended_pairs / dense_pairs; }
  /// Dense FLOPs over sparse FLOPs, \f$ n_q n_k / P \f$ ("computes Nx less").
  double compute_saving() const { return dense_flops() / flops(); }
  /// Dense score bytes over sparse score bytes, \f$ n_q n_k / P \f$ again ("stores Nx less").
  double storage_saving() const { return dense_score_bytes() / score_bytes; }
  /// Causal dense pairs over attended pairs: the saving of a causal pattern against causal attention.
  double saving_vs_causal() const { return causal_pairs / attended_pairs; }
};

/// The cost of `pattern` (checked as `validate_pattern`, naming `pattern`), for `heads` >= 1 heads
/// of `head_dim` >= 1. `tvlab::Error` naming the parameter otherwise.
SparseAttentionCost sparse_attention_cost(const SparsePattern& pattern, std::size_t heads, std::size_t head_dim);

/// The same numbers for `sliding_window_pattern(n, left, right)` without building it: row \f$ i \f$
/// sees \f$ \min(n-1, i+w_r) - \max(0, i-w_l) + 1 \f$ keys, so
/// \f[ P = n^2 - T(n - 1 - w_r) - T(n - 1 - w_l), \qquad T(m) = \tfrac{m(m+1)}{2} \text{ for } m > 0,\ 0 \text{ otherwise}: \f]
/// the dense square minus the two corner triangles the window cuts off (\f$ \approx n(w_l + w_r + 1) \f$
/// for \f$ w \ll n \f$); \f$ \max_i |S_i| = \min(n, w_l + w_r + 1) \f$, \f$ \min_i |S_i| = \min(n, \min(w_l, w_r) + 1) \f$.
/// For any n >= 1 (the lesson's long sequences need no pattern in memory). `pattern_bytes` is
/// what the pattern would take if it were built.
SparseAttentionCost sliding_window_cost(std::size_t n, long long left, long long right, std::size_t heads,
                                        std::size_t head_dim);

}  // namespace tvlab::analysis
