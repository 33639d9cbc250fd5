#pragma once
/// @file
/// The named sparse attention patterns of chapter 03, each a function that returns \f$ S_i \f$
/// for every query row as a `SparsePattern` (self-attention: \f$ n_q = n_k = n \f$, query \f$ i \f$
/// and key \f$ j \f$ are positions). Every builder checks its parameters and throws
/// `tvlab::Error` naming the one that is wrong. Window widths are signed, as in `SlidingWindow`,
/// so that a negative width (a typical slip: `w - 1` with `w = 0`) is an error and not a huge
/// unsigned window.
/// @ingroup ch03

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tvlab/core/sparse_pattern.hpp"

namespace tvlab {

/// Every key: dense attention, \f$ S_i = \{0, \dots, n-1\} \f$ (or \f$ j \le i \f$ with `causal`).
SparsePattern full_pattern(std::size_t n, bool causal);

/// Sliding window (local attention): \f$ S_i = \{ j : i - w_l \le j \le i + w_r \} \cap [0, n) \f$.
/// The documents' bidirectional window of radius \f$ w \f$ ("2w+1" keys) is
/// \f$ w_l = w_r = w \f$; a causal window of \f$ W \f$ keys (Hugging Face's Mistral
/// `sliding_window = W`) is \f$ w_l = W - 1, w_r = 0 \f$. Widths \f$ \ge n \f$ give `full_pattern`.
/// `left` and `right` must be \f$ \ge 0 \f$.
SparsePattern sliding_window_pattern(std::size_t n, long long left, long long right);

/// Dilated sliding window (Longformer, Beltagy et al. 2020, §3.1): \f$ w \f$ = `radius` keys on
/// each side with gaps of \f$ d - 1 \f$: \f$ S_i = \{ i + m d : -w \le m \le w \} \cap [0, n) \f$
/// (\f$ m \le 0 \f$ only with `causal`). `dilation` \f$ d \ge 1 \f$; \f$ d = 1 \f$ is
/// `sliding_window_pattern(n, w, w)`. Longformer gives each head its own dilation: pass one
/// pattern per head (`HeadPatterns`). (Longformer's "window size w" counts both sides, \f$ w/2 \f$
/// each; this function takes the one-sided radius.)
SparsePattern dilated_window_pattern(std::size_t n, long long radius, std::size_t dilation, bool causal);

/// Sparse Transformer, strided (Child et al. 2019, §4.2), causal, stride \f$ l \ge 1 \f$. The two
/// heads of the factorisation: `head` 0, the last \f$ l \f$ positions
/// \f$ A^{(1)}_i = \{ j : 0 \le i - j < l \} \f$ (as OpenAI's `sparse_attention` code, local band
/// of \f$ l \f$; the paper's set \f$ \{\max(0, i - l), \dots, i\} \f$ has \f$ l + 1 \f$); `head` 1,
/// every \f$ l \f$-th position back \f$ A^{(2)}_i = \{ j \le i : (i - j) \bmod l = 0 \} \f$;
/// `head` 2, their union (the single-head "merged" form).
SparsePattern strided_pattern(std::size_t n, std::size_t stride, int head);

/// Sparse Transformer, fixed (Child et al. 2019, §4.2), causal, blocks of \f$ l \f$ and \f$ c \f$
/// "summary" columns at the end of each block: `head` 0, the positions of the query's own block
/// \f$ A^{(1)}_i = \{ j \le i : \lfloor j/l \rfloor = \lfloor i/l \rfloor \} \f$; `head` 1, the summary
/// columns \f$ A^{(2)}_i = \{ j \le i : j \bmod l \in \{l - c, \dots, l - 1\} \} \f$ (the same
/// columns for every query); `head` 2, their union. \f$ 1 \le c \le l \f$.
SparsePattern fixed_pattern(std::size_t n, std::size_t block, std::size_t summary, int head);

/// Longformer (Beltagy et al. 2020): a sliding window of `radius` \f$ w \f$ (both sides; \f$ j \le i \f$
/// too with `causal`) plus symmetric global attention: a global position sees every key, and every
/// query sees every global key:
/// \f$ S_i = [0, n) \f$ for \f$ i \in G \f$, else \f$ ([i - w, i + w] \cup G) \cap [0, n) \f$.
/// `globals` are positions < n (sorted or not, duplicates allowed). Interior rows that no global
/// position lies near have \f$ 2w + 1 + |G| \f$ keys.
SparsePattern longformer_pattern(std::size_t n, long long radius, const std::vector<std::size_t>& globals,
                                 bool causal);

/// BigBird ITC (Zaheer et al. 2020, "internal transformer construction", in the blocked form of
/// its App. D and of Hugging Face's `BigBirdBlockSparseAttention`), bidirectional, in blocks of
/// \f$ b \f$ = `block` positions (\f$ n \f$ a multiple of \f$ b \f$, \f$ N = n/b \f$ blocks):
/// - the first \f$ \lceil g/2 \rceil \f$ and the last \f$ \lfloor g/2 \rfloor \f$ of the
///   \f$ g \f$ = `global_blocks` blocks are global: their rows see every key, and every row sees
///   their keys (\f$ g = 2 \f$ is Hugging Face's fixed choice: the first and the last block);
/// - every other query block \f$ I \f$ sees its 3-block window \f$ \{I-1, I, I+1\} \cap [0, N) \f$,
///   the global blocks, and \f$ r \f$ = `random_blocks` key blocks drawn without replacement from
///   the blocks that are neither global nor in its window.
///
/// So an interior row (window clear of the global blocks) has \f$ (3 + r + g) b \f$ keys
/// (\f$ (5 + r) b \f$ for \f$ g = 2 \f$), a row whose window touches a global block
/// \f$ (2 + r + g) b \f$ (Hugging Face's second and second-to-last blocks: \f$ (4 + r) b \f$), a
/// global row \f$ n \f$.
///
/// The draw, so that another implementation can reproduce it: `Rng rng(seed)`; for each
/// non-global query block \f$ I \f$ in increasing order, list its candidates (not global, not in
/// \f$ \{I-1, I, I+1\} \f$) in increasing order, \f$ m \f$ of them, and for \f$ t = 0, \dots, r-1 \f$
/// swap candidate \f$ t \f$ with candidate \f$ t + u \f$, \f$ u \f$ = `rng.next_u64() % (m - t)` (a
/// partial Fisher-Yates shuffle); the first \f$ r \f$ candidates are the random blocks. (The
/// modulo's bias is below \f$ m / 2^{64} \f$.) One head: for per-head random blocks, as BigBird
/// draws them, build one pattern per head with different seeds.
///
/// Errors name the parameter: `block` 0, `n` not a multiple of `block`, `global_blocks` above
/// \f$ N \f$, and `random_blocks` > 0 with fewer than \f$ g + 3 + r \f$ blocks (an interior block
/// would not have \f$ r \f$ candidates).
SparsePattern bigbird_pattern(std::size_t n, std::size_t block, std::size_t global_blocks, std::size_t random_blocks,
                              std::uint64_t seed);

}  // namespace tvlab
