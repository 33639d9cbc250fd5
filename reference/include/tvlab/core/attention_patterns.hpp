#pragma once
/// @file
/// The named sparse attention patterns of chapter 03, each a function that returns \f$ S_i \f$
/// for every query row as a `SparsePattern` (self-attention: \f$ n_q = n_k = n \f$, query \f$ i \f$
/// and key \f$ j \f$ are positions). Every builder checks its parameters and throws
/// `tvlab::Error` naming the one that is wrong.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tvlab/core/sparse_pattern.hpp"

namespace tvlab {

/// Every key: dense attention, \f$ S_i = \{0, \dots, n-1\} \f$ (or \f$ j \le i \f$ with `causal`).
SparsePattern full_pattern(std::size_t n, bool causal);

/// Sliding window (local attention): \f$ S_i = \{ j : i - w_l \le j \le i + w_r \} \f$, within
/// \f$ [0, n) \f$. The documents' bidirectional window of radius \f$ w \f$ ("2w+1" keys) is
/// \f$ w_l = w_r = w \f$; a causal window of \f$ w \f$ keys (Mistral's) is \f$ w_l = w - 1, w_r = 0 \f$.
SparsePattern sliding_window_pattern(std::size_t n, std::size_t left, std::size_t right);

/// Dilated sliding window (Longformer, Beltagy et al. 2020, §3.1): \f$ w \f$ keys on each side
/// with gaps of \f$ d - 1 \f$: \f$ S_i = \{ i + m d : -w \le m \le w \} \cap [0, n) \f$
/// (\f$ m \le 0 \f$ only with `causal`). `dilation` = 1 is `sliding_window_pattern(n, w, w)`.
SparsePattern dilated_window_pattern(std::size_t n, std::size_t radius, std::size_t dilation, bool causal);

/// Sparse Transformer, strided (Child et al. 2019, §4.2), causal, stride \f$ l \f$. The two heads
/// of the factorisation: `head` 0, the last \f$ l \f$ positions
/// \f$ A^{(1)}_i = \{ j : 0 \le i - j < l \} \f$; `head` 1, every \f$ l \f$-th
/// position back \f$ A^{(2)}_i = \{ j \le i : (i - j) \bmod l = 0 \} \f$. `head` 2 is their union
/// (the single-head "merged" form).
SparsePattern strided_pattern(std::size_t n, std::size_t stride, int head);

/// Sparse Transformer, fixed (Child et al. 2019, §4.2), causal, blocks of \f$ l \f$ and \f$ c \f$
/// "summary" columns at the end of each block: `head` 0, the positions of the query's own block
/// \f$ A^{(1)}_i = \{ j \le i : \lfloor j/l \rfloor = \lfloor i/l \rfloor \} \f$; `head` 1, the summary
/// columns \f$ A^{(2)}_i = \{ j \le i : j \bmod l \in \{l - c, \dots, l - 1\} \} \f$; `head` 2, their union.
SparsePattern fixed_pattern(std::size_t n, std::size_t block, std::size_t summary, int head);

/// Longformer (Beltagy et al. 2020): a sliding window of radius \f$ w \f$ (both sides; \f$ j \le i \f$
/// too with `causal`) plus symmetric global attention: a global position sees every key, and every
/// query sees every global key. `globals` are positions < n (sorted or not, duplicates allowed).
SparsePattern longformer_pattern(std::size_t n, std::size_t radius, const std::vector<std::size_t>& globals,
                                 bool causal);

/// BigBird ITC (Zaheer et al. 2020, App. D, "internal transformer construction"), in blocks of
/// \f$ b \f$ positions (\f$ n \f$ a multiple of \f$ b \f$): the first \f$ \lceil g/2 \rceil \f$ and
/// the last \f$ \lfloor g/2 \rfloor \f$ of the \f$ g \f$ = `global_blocks` blocks are global
/// (they attend to and are attended by everything); every other query block attends to its
/// 3-block window (itself and its two neighbours), the global blocks, and \f$ r \f$ =
/// `random_blocks` key blocks drawn without replacement from the blocks that are neither
/// global nor in its window, with tvlab's `Rng(seed)`.
SparsePattern bigbird_pattern(std::size_t n, std::size_t block, std::size_t global_blocks, std::size_t random_blocks,
                              std::uint64_t seed);

}  // namespace tvlab
