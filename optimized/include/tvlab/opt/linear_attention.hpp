#pragma once
/// @file
/// Kernelised linear attention on the CPU (chapter 06). Must match `tvlab::ref::linear_attention`
/// and the three causal forms of `tvlab/ref/linear_attention.hpp`: same names, same contracts,
/// same errors.
///
/// The reference sums in double, one product at a time. Here every form is float and its work is
/// matrix products, OpenMP threads over the heads and OpenBLAS single-threaded inside each
/// (`detail::SingleThreadedBlas`):
///
/// | form | products per head | work |
/// | --- | --- | --- |
/// | non-causal | \f$ S = \phi(K)^\top V \f$, then \f$ \phi(Q) S \f$ | \f$ 2 (n_q + n_k) m d_v \f$ |
/// | recurrent | one rank-1 update of S and one readout per token (SIMD loops) | \f$ 4 n m d_v \f$ |
/// | parallel | \f$ (\phi(Q)\phi(K)^\top \odot M) V \f$ in blocks of rows | \f$ n^2 (m + d_v) \f$ |
/// | chunked | per chunk of C: \f$ \phi(Q_c) S \f$, \f$ (\phi(Q_c)\phi(K_c)^\top \odot M) V_c \f$, \f$ S \mathrel{+}= \phi(K_c)^\top V_c \f$ | \f$ 2 n C (m + d_v) + 4 n m d_v \f$ |
///
/// (m: the feature dimension, the key width d_k for the elementwise maps; the normaliser adds
/// \f$ 1/d_v \f$ of each.)
///
/// **What float accumulation costs.** The state \f$ S_t = \sum_{j \le t} \phi(k_j) v_j^\top \f$ is a
/// float sum over every position so far, and each position's output reads it. The recurrence adds
/// one term per token, so after n tokens an entry of S carries up to n roundings (typically
/// \f$ \sqrt n \f$ of them, each \f$ 2^{-24} \f$ of the running sum); the chunked form adds one
/// chunk's product per chunk, n/C roundings of the state plus C inside each product, which is why
/// it is also the more accurate of the two for long sequences. The error is relative to the sum of
/// |terms|, \f$ \sum_j \phi(q_i)^\top\phi(k_j) |v_j| \f$, not to the output: an output that is a
/// small difference of large sums (unnormalised, or values of mixed sign that cancel) loses the
/// most digits. The tests and the benchmark compare against the double reference within
/// \f$ \text{reduction\_rtol}(n d) = 10\,\epsilon_{32}\sqrt{n d} \f$ (\f$ 8.7 \cdot 10^{-4} \f$ at
/// n = 16384, d = 128). Measured by the chapter's benchmark at n = 16384 (8 heads, q, k, v ~ N(0, 1)),
/// max |opt - ref| over max |ref|:
///
/// | case | recurrent | chunked, C = 64 |
/// | --- | --- | --- |
/// | elu+1, normalised, d = 128 | \f$ 4.5 \cdot 10^{-7} \f$ | \f$ 1.2 \cdot 10^{-7} \f$ |
/// | identity, unnormalised, d = 64 (terms of both signs) | \f$ 2.6 \cdot 10^{-6} \f$ | \f$ 4.3 \cdot 10^{-7} \f$ |
///
/// far inside the tolerance: a float state is enough at these lengths, and the chunked form's
/// fewer roundings show.

#include <cstddef>

#include "tvlab/core/linear_attention_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// @ingroup ch06
/// \f$ \phi(x) \f$ of every element, vectorised and threaded. Same contract as `ref::feature_map`.
Tensor3 feature_map(const Tensor3& x, FeatureMap map);

/// @ingroup ch06
/// Non-causal linear attention. Per head (threads over heads), two SGEMMs and two GEMVs:
/// \f$ S = \phi(K)^\top V \f$ `[m, d_v]` and \f$ z = \phi(K)^\top \mathbf 1 \f$, then the numerators
/// \f$ \text{scale}\,\phi(Q) S \f$ and the normalisers \f$ \text{scale}\,\phi(Q) z \f$, and one
/// division per output row. Same contract as `ref::linear_attention`.
Tensor3 linear_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const LinearAttentionConfig& cfg);

/// @ingroup ch06
/// Causal linear attention token by token (threads over heads): per token,
/// \f$ S \mathrel{+}= \phi(k_t) v_t^\top \f$ (an axpy per row of S) and \f$ z \mathrel{+}= \phi(k_t) \f$, then
/// \f$ o_t = \text{scale}\,S^\top \phi(q_t) \f$, its partial sums held in registers across the rows
/// of S, and the normaliser \f$ \text{scale}\,\phi(q_t)^\top z \f$. One token (a decode step) reads
/// the state before it writes it, \f$ o = \phi(q)^\top S_{t-1} + (\phi(q)^\top\phi(k))\, v \f$ (the
/// same sum, regrouped), checks every output, then updates `state` in place, all in one parallel
/// region with one thread per 256 KiB of state; longer inputs work on a copy of the state,
/// committed when every output is good. Same contract as `ref::causal_linear_attention_recurrent`.
Tensor3 causal_linear_attention_recurrent(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                          const LinearAttentionConfig& cfg, LinearAttentionState& state);

/// @ingroup ch06
/// The masked quadratic form, in blocks of 64 query rows (threads over heads): for rows
/// \f$ [r_0, r_1) \f$, \f$ A = \text{scale}\,\phi(Q_{r_0:r_1}) \phi(K_{0:r_1})^\top \f$ (SGEMM), the entries
/// above the diagonal zeroed (\f$ M_{ij} = [j \le i] \f$), \f$ O = A V_{0:r_1} \f$ (SGEMM) and the
/// row sums of A as normalisers. \f$ O(n^2 d) \f$ work, a `[64, n]` buffer per thread instead of
/// `[n, n]`. Same contract as `ref::causal_linear_attention_parallel`.
Tensor3 causal_linear_attention_parallel(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                         const LinearAttentionConfig& cfg);

/// @ingroup ch06
/// The chunked form on matrix products (threads over heads). Per chunk c of C rows, from the state
/// of the chunks before it:
/// - inter-chunk: \f$ O_{[c]} = \text{scale}\,\phi(Q_{[c]}) S \f$ (SGEMM) and the normalisers
///   \f$ \text{scale}\,\phi(Q_{[c]}) z \f$;
/// - intra-chunk: \f$ A = \text{scale}\,\phi(Q_{[c]}) \phi(K_{[c]})^\top \f$ (SGEMM), masked to
///   \f$ j \le i \f$, \f$ O_{[c]} \mathrel{+}= A V_{[c]} \f$ (SGEMM with \f$ \beta = 1 \f$), and A's row sums
///   added to the normalisers;
/// - the state: \f$ S \mathrel{+}= \phi(K_{[c]})^\top V_{[c]} \f$ (SGEMM with \f$ \beta = 1 \f$),
///   \f$ z \mathrel{+}= \phi(K_{[c]})^\top \mathbf 1 \f$.
///
/// S and z are float (see the file's note on accuracy). The intra-chunk work, \f$ 2 n C (m + d_v) \f$,
/// grows with C and the inter-chunk work, \f$ 4 n m d_v \f$, does not, while OpenBLAS stays
/// efficient on products as small as 16 x 16: on the chapter's benchmark CPU (2 cores, AVX-512)
/// C = 16 to 32 is the fastest and C = 128 20-80% slower (flash-linear-attention's chunked
/// form, written for GPUs, defaults to C = 64). Same contract as `ref::causal_linear_attention_chunked`; the
/// state is updated only when every output is good.
/// @param chunk_size C >= 1
Tensor3 causal_linear_attention_chunked(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                        const LinearAttentionConfig& cfg, std::size_t chunk_size,
                                        LinearAttentionState& state);

}  // namespace tvlab::opt
