#pragma once
/// @file
/// Chapter 03: how far information travels through stacked sparse attention layers. Output
/// \f$ i \f$ of a layer with pattern \f$ S \f$ is a mix of the layer's inputs \f$ j \in S_i \f$, so
/// after layers \f$ S^{(1)}, \dots, S^{(L)} \f$ (the first applied first) output \f$ p \f$ can depend
/// on the inputs
/// \f[ R_L(p) = \bigcup_{j_L \in S^{(L)}_p}\ \bigcup_{j_{L-1} \in S^{(L-1)}_{j_L}} \cdots\ S^{(1)}_{j_2}, \f]
/// the positions from which a path of \f$ L \f$ attention steps leads to \f$ p \f$. Computed exactly
/// from the patterns (`receptive_field`), and in closed form for stacked windows
/// (`stacked_window_field`: the documents' \f$ L \cdot w \f$, Mistral's \f$ 32 \times 4096 \f$).
///
/// Only the attention is followed. A Transformer block also has a residual connection, which
/// adds \f$ i \f$ itself to every \f$ S_i \f$; every pattern of this chapter already contains
/// \f$ i \f$ except the fixed pattern's summary head (`fixed_pattern` head 1) alone.
/// @ingroup ch03

#include <cstddef>
#include <limits>
#include <vector>

#include "tvlab/core/sparse_pattern.hpp"

namespace tvlab::analysis {

/// \f$ R_L(p) \f$ as a membership vector of length \f$ n \f$: the input positions that can
/// influence output `position` after `layers` (`layers[0]` is applied first). Every layer is a
/// square pattern of the same \f$ n \f$ (self-attention); `position` < n. Layer by layer from the
/// output back: the set starts as \f$ \{p\} \f$ and each layer, last first, replaces it by the union
/// of its rows' keys. `tvlab::Error` naming `layers` or `position` otherwise.
std::vector<bool> receptive_field(const std::vector<SparsePattern>& layers, std::size_t position);

/// How many positions a membership vector holds.
std::size_t count_reached(const std::vector<bool>& reached);

/// The inputs of stacked sliding windows, in closed form: positions
/// \f$ p + k d \f$ for \f$ -L w_l \le k \le L w_r \f$ inside \f$ [0, n) \f$.
struct WindowField {
  std::size_t first = 0;  ///< the leftmost input reached
  std::size_t last = 0;   ///< the rightmost input reached
  std::size_t step = 1;   ///< the inputs reached are first, first + step, ..., last (step = dilation)
  std::size_t count = 0;  ///< how many: (last - first) / step + 1
  /// \f$ p - \text{first} \f$: how far back information reaches (\f$ L w_l d \f$ away from the start).
  std::size_t reach_back = 0;
  /// \f$ \text{last} - p \f$: how far ahead.
  std::size_t reach_ahead = 0;
};

/// \f$ R_L(p) \f$ for \f$ L \f$ = `layers` identical (dilated) windows
/// \f$ S_i = \{ i + m d : -w_l \le m \le w_r \} \cap [0, n) \f$: each layer moves information at
/// most \f$ w_l d \f$ to the right and \f$ w_r d \f$ to the left, always by multiples of \f$ d \f$,
/// and a path that heads straight for its target never leaves \f$ [0, n) \f$, so
/// \f$ R_L(p) = \{ p + k d : -L w_l \le k \le L w_r \} \cap [0, n) \f$. The documents' "L·w": a
/// bidirectional window of radius \f$ w \f$ (\f$ w_l = w_r = w \f$, \f$ d = 1 \f$) reaches \f$ L w \f$
/// positions each way; a causal window of \f$ W \f$ keys (\f$ w_l = W - 1 \f$, \f$ w_r = 0 \f$)
/// reaches \f$ L (W - 1) \f$ back. With \f$ d > 1 \f$ only every \f$ d \f$-th position is reached.
/// n >= 1, position < n, layers >= 0 (0 layers: \f$ \{p\} \f$), left, right >= 0, dilation >= 1.
WindowField stacked_window_field(std::size_t n, std::size_t layers, long long left, long long right,
                                 std::size_t dilation, std::size_t position);

/// \f$ \lceil \Delta / w \rceil \f$: the fewest stacked windows of radius \f$ w \ge 1 \f$ through
/// which input \f$ j \f$ reaches output \f$ p \f$ at distance \f$ \Delta = |p - j| \f$ (each layer
/// carries information at most \f$ w \f$ positions). 0 for \f$ \Delta = 0 \f$.
std::size_t layers_to_travel(std::size_t distance, long long radius);

/// No path: what `hops` gives a position that never reaches the output.
inline constexpr std::size_t kUnreachable = std::numeric_limits<std::size_t>::max();

/// For every input \f$ j \f$ the length of the shortest path \f$ j \to \dots \to p \f$ in the graph of
/// `pattern` (an edge from \f$ j \f$ to \f$ i \f$ when \f$ j \in S_i \f$): the fewest attention steps
/// that carry information from \f$ j \f$ to `position` when every layer uses this pattern
/// (breadth-first search from \f$ p \f$; 0 for \f$ p \f$ itself, `kUnreachable` where no path exists).
/// For a pattern with \f$ i \in S_i \f$ for every \f$ i \f$ (or with a residual connection) the
/// receptive field of \f$ L \f$ layers is \f$ \{ j : \text{hops}_j \le L \} \f$: windows give
/// \f$ \lceil |p - j| / w \rceil \f$, a Longformer global token makes every distance at most 2.
std::vector<std::size_t> hops(const SparsePattern& pattern, std::size_t position);

}  // namespace tvlab::analysis
