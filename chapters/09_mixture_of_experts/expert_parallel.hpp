#pragma once
/// @file
/// Chapter 09, expert parallelism over MPI (004 L179–L181; GShard, Lepikhin et al. 2020, §2.2 and
/// §3.2; DeepSeek-V2, arXiv:2405.04434, §2.2.2; DeepSeek-V3, arXiv:2412.19437, §2.1.2 and §3.2.2).
/// Built only where CMake finds MPI (`chapter.cmake`); the reference and optimized libraries never
/// depend on it.
///
/// R ranks (processes) run one MoE layer together. Each rank holds
/// - **its own batch** of tokens x `[tokens, d_model]` (data parallel: the batches differ);
/// - **E / R of the experts**: rank \f$ \rho \f$ owns experts \f$ \rho E/R \f$ .. \f$ (\rho + 1) E/R - 1 \f$ (expert parallel), so
///   each expert's weights live on one rank only;
/// - a copy of the router \f$ W_g \f$ and of the shared experts (small, or used by every token: they need
///   no exchange).
///
/// One layer is then, on every rank at once:
/// 1. **route** its tokens (`opt::router_logits`' SGEMM, `ref::route_top_k`, or the device-limited
///    router below);
/// 2. **dispatch**: a token goes once to each rank that owns one of its experts (one row per
///    (token, rank) pair, however many of its experts live there), with its assignments there
///    (row, local expert, gate): counts by `MPI_Alltoall`, rows and assignments by `MPI_Alltoallv`;
/// 3. **experts**: each rank runs its experts on the rows it received (`opt::moe_experts` on its
///    shard: grouped by expert, three SGEMMs per expert) and sums each row's gate-weighted
///    outputs, \f$ \sum_{a \in \mathrm{row}} g_a \mathrm{Expert}_{e_a}(x_t) \f$;
/// 4. **combine**: those partial sums go back by `MPI_Alltoallv` in the order they came, and each
///    token adds its partial sums (in the order of its first assignment on each rank) and its
///    shared experts' output.
///
/// The result is `opt::moe_layer` of the rank's batch with the global weights; only the order of
/// the float sums differs (a token's experts are added per rank, then across ranks).
///
/// **Device-limited routing** (DeepSeek-V2 §2.2.2): a token may use experts on at most M ranks.
/// Each rank scores \f$ \max_{i \in \rho} (s_i + b_i) \f$ over its experts; the M best ranks stay, and the k
/// experts are chosen among theirs. A token then travels to at most M ranks, fewer rows than
/// the up to k of plain top-k. (DeepSeek-V3 §2.1.2 limits nodes, M = 4, scoring a node by the sum
/// of its best \f$ k/M \f$ scores; `ref::route_top_k`'s `n_group` / `topk_group` is that rule on groups.)

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tvlab/core/moe_types.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/moe_router.hpp"

namespace tvlab::mpi {

/// @ingroup ch09
/// The distributed layer's settings: the router, and M.
struct ExpertParallelConfig {
  ref::RouterConfig router;   ///< E, k and the scores, as for `ref::route_top_k` (n_group 1 when max_ranks > 0)
  std::size_t max_ranks = 0;  ///< M: the ranks a token's experts may span (DeepSeek-V2's device limit); 0: no limit
};

/// @ingroup ch09
/// One rank's part of an MoE layer: the router and the shared experts (copies), and the rank's
/// routed experts as an `MoeWeights` of E / R experts whose router is their E / R columns of
/// \f$ W_g \f$ (so that `opt::moe_experts` runs them as a small layer of its own).
struct ExpertShard {
  Tensor2 router;                     ///< \f$ W_g \f$ `[d_model, E]`, every rank a copy
  MoeWeights local;                   ///< this rank's experts first_expert .. first_expert + E/R - 1
  std::vector<SwigluWeights> shared;  ///< the shared experts, every rank a copy
  std::size_t first_expert = 0;       ///< the global index of local.experts[0]
};

/// @ingroup ch09
/// Bytes and rows one rank moved in one layer. Rows are counted per peer rank (the rank's own
/// share, copied locally, is in `rows_to[rank]` but not in the byte totals). A dispatched row is
/// d_model floats plus 12 bytes per assignment (row, local expert, gate: `AssignmentMessage`); a
/// returned row is d_model floats.
struct ExchangeStats {
  std::vector<std::size_t> rows_to;           ///< token rows sent to each rank (one per token and rank)
  std::vector<std::size_t> rows_from;         ///< token rows received from each rank
  std::vector<std::size_t> assignments_to;    ///< assignments sent to each rank
  std::vector<std::size_t> assignments_from;  ///< assignments received from each rank
  std::size_t bytes_sent = 0;                 ///< to the other ranks: dispatch and combine
  std::size_t bytes_received = 0;             ///< from the other ranks: dispatch and combine
  double exchange_seconds = 0.0;              ///< in the four exchanges (waiting for the slowest rank included)
  double expert_seconds = 0.0;                ///< in the rank's experts (routing and combining not counted)
};

/// @ingroup ch09
/// What travels with the rows: assignment (row within the block from its sender, the expert's
/// index on the receiving rank, gate).
struct AssignmentMessage {
  std::int32_t row;
  std::int32_t local_expert;
  float gate;
};

/// @ingroup ch09
/// The rank that owns expert e when E experts are spread over `ranks`: \f$ \lfloor e / (E/R) \rfloor \f$.
std::size_t owner_rank(std::size_t expert, std::size_t num_experts, std::size_t ranks);

/// @ingroup ch09
/// Checks that E experts can be spread over `ranks` ranks (R divides E) and M: 0 or 1..R, with
/// k at most the experts of M ranks, and n_group 1 when M > 0. Errors name `ranks` (with E),
/// `max_ranks` or `top_k`; the router's own checks (`ref::validate_router`) run first.
void validate_expert_parallel(const char* function, const ExpertParallelConfig& cfg, std::size_t ranks);

/// @ingroup ch09
/// Rank `rank`'s shard of the global layer w (copies of its experts, of the router and of the
/// shared experts). Errors: those of `validate_moe`'s shapes, R not dividing E.
ExpertShard shard_of(const MoeWeights& w, std::size_t rank, std::size_t ranks);

/// @ingroup ch09
/// Device-limited top-k routing of logits `[tokens, E]` with experts spread over `ranks` ranks:
/// for each token, the M ranks of largest \f$ \max_{i \in \rho}(s_i + b_i) \f$ (ties: the lower rank), then
/// `ref::route_top_k` on the token with a selection bias that rules out the other ranks' experts
/// (the bias chooses, never weighs: the gates are the unrestricted router's scores). With M = R
/// it is `ref::route_top_k` exactly. Errors: `validate_expert_parallel`, `ref::route_top_k`'s.
Routing route_device_limited(const Tensor2& logits, const ExpertParallelConfig& cfg, std::size_t ranks,
                             const std::vector<float>& bias = {});

/// @ingroup ch09
/// The MoE layer for this rank's tokens x `[tokens, d_model]` (at least one token; every rank calls it,
/// each with its own batch and shard), the steps above. Returns y `[tokens, d_model]`; fills
/// `stats` when given; appends one text per step (route, dispatch, experts, combine) to `steps`
/// when given, for `print_in_rank_order`. Errors (the same on every rank, raised before any
/// message): `validate_expert_parallel`, the shard's shapes, x's width; a row count beyond
/// `int` (MPI's counts).
Tensor2 expert_parallel_layer(MPI_Comm comm, const Tensor2& x, const ExpertShard& shard, const ExpertParallelConfig& cfg,
                              const std::vector<float>& bias = {}, ExchangeStats* stats = nullptr,
                              std::vector<std::string>* steps = nullptr);

/// @ingroup ch09
/// Rank 0 prints every rank's text, rank 0 first (the ranks' own printing would interleave).
void print_in_rank_order(MPI_Comm comm, const std::string& text);

}  // namespace tvlab::mpi
