#pragma once
/// @file
/// Chapter 09, routing as optimal transport (004 L175, DOT-MoE: \f$ T^* = \mathrm{Sinkhorn}(C, r, c) \f$; BASE
/// layers, Lewis et al. 2021; S-BASE, Clark et al. 2022, "Unified Scaling Laws for Routed Language
/// Models", section 2; Megatron-LM's `sinkhorn` in megatron/core/transformer/moe/moe_utils.py).
///
/// Convention: the kernel is \f$ K_{te} = \exp(z_{te}) \f$ for router logits z `[N, E]` (Megatron's choice;
/// in the cost form of the documents, \f$ K = \exp(-C/\varepsilon) \f$ with cost \f$ C = -z \f$ and \f$ \varepsilon = 1 \f$). The plan
/// \f[ T = \mathrm{diag}(u)\, K\, \mathrm{diag}(v) \f]
/// is the one of that form whose row sums are r (each token's mass, default 1) and column sums c
/// (each expert's share, default N/E: a perfectly balanced load). Sinkhorn's algorithm alternates
/// \f$ u_t = r_t / \sum_e K_{te} v_e \f$ (rows right) and \f$ v_e = c_e / \sum_t K_{te} u_t \f$ (columns right);
/// after a column step the columns are exact, and it stops when every row is within `tolerance`
/// of \f$ r_t \f$. The plan exists only when \f$ \sum_t r_t = \sum_e c_e \f$ (both count the total mass).
///
/// The reference runs the iteration in logs, \f$ f = \log u \f$, \f$ g = \log v \f$,
/// \f$ f_t = \log r_t - \log \sum_e \exp(z_{te} + g_e) \f$ and \f$ g_e = \log c_e - \log \sum_t \exp(z_{te} + f_t) \f$,
/// so logits of ±1e4 neither overflow nor leave a row of zeros: the same scalings, computed safely.
///
/// A consequence worth seeing: a fixed preference for some experts, an offset $ eta_e $ added to every
/// token's logit for expert e, multiplies column e of K by $ e^{eta_e} $, which $ v_e $ absorbs: the plan,
/// and so the routing, is unchanged. Sinkhorn removes exactly the kind of skew that a collapsing
/// router develops (`analysis::router_balance_table` shows it).
///
/// Routing: each token takes the k experts of largest \f$ T_{te} \f$ (ties: the lower expert), the plan
/// deciding *who goes where*; the gates are the router's softmax over the chosen experts,
/// renormalised to sum 1, so they stay differentiable functions of the logits. (S-BASE and
/// Megatron likewise choose by the plan and weigh by the router's own scores; Megatron takes the
/// softmax unrenormalised for k > 1 and a sigmoid for k = 1.)

#include <cstddef>
#include <vector>

#include "tvlab/core/moe_types.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch09
/// The marginals and stopping rule of Sinkhorn's algorithm.
struct SinkhornConfig {
  std::vector<double> row_marginals;  ///< r `[N]`; empty: 1 per token
  std::vector<double> col_marginals;  ///< c `[E]`; empty: N/E per expert (times the total of r over N)
  double tolerance = 1e-6;            ///< stop when \f$ \max_t |\sum_e T_{te} - r_t| \le \f$ tolerance
  std::size_t max_iterations = 1000;  ///< row-and-column steps at most
};

/// @ingroup ch09
/// A transport plan and how it was reached.
struct SinkhornPlan {
  DTensor2 plan;                 ///< T `[N, E]`
  std::size_t iterations = 0;    ///< row-and-column steps taken
  double row_error = 0.0;        ///< \f$ \max_t |\sum_e T_{te} - r_t| \f$ at the end
  bool converged = false;        ///< row_error <= tolerance
};

/// @ingroup ch09
/// Sinkhorn's plan for logits `[N, E]`. Errors: empty or non-finite logits, marginals of the wrong
/// length, not positive and finite, or whose totals differ (relative difference above 1e-9),
/// tolerance not positive, max_iterations zero.
SinkhornPlan sinkhorn_plan(const Tensor2& logits, const SinkhornConfig& cfg = {});

/// @ingroup ch09
/// Routes logits `[N, E]` by the plan: k assignments per token, largest \f$ T_{te} \f$ first, gates the
/// softmax of the chosen logits. Errors: those of `sinkhorn_plan`, top_k not in 1..E-1, a plan
/// that did not converge within max_iterations.
Routing route_sinkhorn(const Tensor2& logits, std::size_t top_k, const SinkhornConfig& cfg = {});

}  // namespace tvlab::ref
