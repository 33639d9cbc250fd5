#pragma once
/// @file
/// The delta-rule family on the CPU (chapter 06). Must match `tvlab::ref::delta_rule_recurrent` and
/// `tvlab::ref::delta_rule_chunked`: same names, same contracts, same errors (the reference's
/// checks, `ref::validate_delta_rule`, then the same messages for a zero row to normalise and for a
/// state or output beyond float's range).
///
/// The reference works in double, one product at a time. Here the state \f$ S \f$ `[d_k, d_v]` is
/// float, OpenMP threads take one head each, and OpenBLAS runs single-threaded inside each
/// (`detail::SingleThreadedBlas`).
///
/// **Accuracy.** With keys of norm at most 1 and \f$ \beta_t \in [0, 1] \f$ every step multiplies the
/// state by a matrix of norm at most 1 (\f$ (I - \beta k k^\top) D_t \f$), so rounding errors made at
/// earlier steps do not grow; each entry of an output carries the roundings of a float sum over the
/// positions so far, as causal linear attention's does (see `tvlab/opt/linear_attention.hpp`). The
/// chapter's tests compare against the double reference within
/// \f$ \text{reduction\_rtol}(T d_k) = 10\,\epsilon_{32}\sqrt{T d_k} \f$ in relative RMS error.

#include <cstddef>

#include "tvlab/core/delta_rule_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// @ingroup ch06
/// The recurrence token by token, threads over heads. Per token, two passes over S in blocks of
/// columns whose partial sums stay in SIMD registers across the d_k rows:
/// 1. decay and predict: row c of S times \f$ e^{g_t[c]} \f$, written back, and
///    \f$ p = \tilde S^\top k_t \f$ summed from the same loads;
/// 2. write and read: \f$ u_t = \beta_t (v_t - p) \f$, then row c of S plus \f$ k_t[c]\, u_t \f$, written
///    back, and \f$ o_t = S_t^\top (\text{scale}\,q_t) \f$ summed from the same values.
///
/// Without the delta rule there is no prediction, and the decay moves into the second pass: one
/// pass per token. Work \f$ 4 d_k d_v \f$ flops per token and head (6 with the delta rule), on a
/// state that stays in the core's cache. Same contract as `ref::delta_rule_recurrent`.
DeltaRuleOutput delta_rule_recurrent(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor2& beta,
                                     const DeltaRuleGate& gate, const DeltaRuleConfig& cfg,
                                     const Tensor3& initial_state = Tensor3::from_shape({0, 0, 0}));

/// @ingroup ch06
/// The WY/UT chunked form (the reference's `ref::delta_rule_chunked`) on matrix products, threads
/// over heads. Per chunk of L <= C positions from the state \f$ S_0 \f$ of the chunks before it, with
/// the cumulative log gates G (summed in double):
/// - decayed rows, each factor at most 1: \f$ K \odot e^{G} \f$, \f$ Q \odot e^{G} \f$,
///   \f$ K \odot e^{G_L - G} \f$;
/// - \f$ A_{ij} = \sum_c k_i[c] k_j[c] e^{G_i[c] - G_j[c]} \f$ (j < i) and
///   \f$ P_{ij} = \sum_c q_i[c] k_j[c] e^{G_i[c] - G_j[c]} \f$ (j <= i). With a scalar gate the
///   exponent is one number per pair: \f$ K [K; Q]^\top \f$ is one SGEMM, each entry then scaled by
///   \f$ e^{G_i - G_j} \le 1 \f$. With a per-channel gate (GLA, KDA) the factor differs per channel
///   and the sums are a loop over the pairs, \f$ L^2 d_k \f$ vectorised exponentials. Never
///   \f$ e^{G_i} e^{-G_j} \f$: for strong decay over a chunk, \f$ e^{-G_j} \f$ overflows float
///   (\f$ G_j < -88 \f$) while the difference stays small;
/// - the UT transform's \f$ T = (I + \mathrm{StrictLower}(\mathrm{diag}(\beta) A))^{-1} \f$ by forward
///   substitution (\f$ L^3/6 \f$ multiply-adds; none without the delta rule);
/// - one SGEMM for both products with the state, \f$ [K \odot e^G;\ Q \odot e^G]\, S_0 \f$, then
///   \f$ U = T\, \mathrm{diag}(\beta)(V - (K \odot e^G) S_0) \f$ (an SGEMM with T);
/// - one SGEMM for the outputs and the next state together:
///   \f$ [O;\ S_L] = [(Q \odot e^G) S_0;\ \mathrm{diag}(e^{G_L}) S_0] + [P;\ (K \odot e^{G_L - G})^\top]\, U \f$,
///   the left factor kept transposed (row j of \f$ [P^\top \mid K \odot e^{G_L - G}] \f$ is built
///   from position j alone), and O placed right above S in one buffer so that the product writes
///   both.
///
/// Two SGEMMs of 2L and L + d_k rows instead of five of L rows each: OpenBLAS's small-matrix
/// kernels run the larger blocks at a higher rate. q, k and v are prepared chunk by chunk, the next
/// chunk's rows requested from memory while this one computes, and checked for values that are not
/// finite as they are read (the reference's checks skip these three scans, `scan_qkv`). When a head
/// stops (such a value, a zero row to normalise, a state or output beyond float's range), the
/// reference runs the whole call: it raises its first error in its order, or, where only float's
/// intermediate sums overflowed, returns its answer.
///
/// Work per chunk: \f$ 4 L^2 d_k \f$ (A, P) \f$ + L^2 d_v \f$ (the solve, as a triangular solve would
/// count it; the product with T does twice that) \f$ + 4 L d_k d_v \f$ (W, the state)
/// \f$ + 2 L d_k d_v + 2 L^2 d_v \f$ (O). The \f$ L^2 \f$ terms grow with C, the others do not; the
/// chapter's README gives the measured times for C = 16, 32 and 64 (C = 16 is the fastest on its
/// 2-core AVX-512 benchmark machine; flash-linear-attention's kernels, written for GPUs, use
/// C = 64). Same contract as `ref::delta_rule_chunked`.
/// @param chunk_size C >= 1; the last chunk may be shorter, and C > T is one chunk
DeltaRuleOutput delta_rule_chunked(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor2& beta,
                                   const DeltaRuleGate& gate, const DeltaRuleConfig& cfg, std::size_t chunk_size,
                                   const Tensor3& initial_state = Tensor3::from_shape({0, 0, 0}));

}  // namespace tvlab::opt
