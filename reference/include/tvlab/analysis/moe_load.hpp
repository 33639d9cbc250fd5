#pragma once
/// @file
/// Chapter 09, how evenly a router loads its experts, measured on synthetic routers (seeded).
///
/// **Data.** Tokens \f$ x \sim \mathcal{N}(0, 1)^{d} \f$ (d = 64) and a random router
/// \f$ W_g \sim \mathcal{N}(0, 1/d)^{d \times E} \f$, so each logit is about \f$ \mathcal{N}(0, 1) \f$: the **balanced**
/// case, where every expert is equally likely in expectation. The **skewed** case adds a fixed
/// Zipf-like preference \f$ -s \ln(i + 1) \f$ to expert i's logit (s = `zipf_exponent`), so that
/// \f$ e^{z_i} \f$ carries a factor \f$ (i + 1)^{-s} \f$: expert 0 is the favourite, as a router drifting toward a
/// few strong experts would be (004 L179, router collapse).
///
/// 1. `drop_rate_table`: the fraction of token–expert assignments that a capacity of
///    \f$ \lceil kN / E \cdot cf \rceil \f$ per expert drops (`expert_capacity(top_k * tokens, E, cf)`), and of
///    tokens that lose every choice. The count dropped by expert i is \f$ \max(0, L_i - C) \f$ whichever
///    priority decides *which* (`apply_capacity` with Switch's `position` here).
/// 2. `bias_balance_table`: a stream of batches from one skewed distribution, routed by DeepSeek-V3's
///    sigmoid top-k with the auxiliary-loss-free bias updated after every batch (`update_bias`),
///    beside the same router with no bias: the max/mean load per step.
/// 3. `router_balance_table`: one batch routed five ways (top-1, top-1 by the Sinkhorn plan, expert
///    choice with c = 1, quantile thresholds of an earlier batch applied to this one), each with its
///    max/mean load and its tokens left with no expert.
/// 4. `uniform_logits_balance`: all-zero logits give \f$ P_i = 1/E \f$, and then
///    \f$ L_{aux} = \alpha E \sum_i f_i / E = \alpha \f$ (k-normalised) whatever the routing f, the minimum over
///    all (f, P) of the balance loss when f = P (\f$ E \sum_i P_i^2 \ge 1 \f$ by Cauchy–Schwarz); the z-loss is
///    \f$ (\ln E)^2 \f$.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tvlab::analysis {

/// @ingroup ch09
/// One row of the drop-rate table.
struct DropRateRow {
  std::string data;              ///< "balanced" or "skewed"
  std::size_t num_experts = 0;   ///< E
  std::size_t top_k = 0;         ///< k
  double capacity_factor = 0.0;  ///< cf
  std::size_t capacity = 0;      ///< C, assignments per expert
  double max_over_mean = 0.0;    ///< the busiest expert's load over the mean load, before dropping
  double dropped = 0.0;          ///< dropped assignments / (k N)
  double unrouted = 0.0;         ///< tokens with every choice dropped / N
};

/// @ingroup ch09
/// Drop rates for every (data, E, k, cf): `tokens` tokens per batch, softmax top-k routing, Switch's
/// priority. Errors: tokens zero, an empty list, E < 2, k not in 1..E-1, a capacity factor not
/// positive, zipf_exponent negative.
std::vector<DropRateRow> drop_rate_table(std::size_t tokens, const std::vector<std::size_t>& num_experts,
                                         const std::vector<std::size_t>& top_ks, const std::vector<double>& capacity_factors,
                                         double zipf_exponent, std::uint64_t seed);

/// @ingroup ch09
/// One reported step of the bias-update stream: the max/mean load of that step's batch.
struct BiasBalanceRow {
  std::size_t step = 0;
  double plain = 0.0;          ///< with no bias
  std::vector<double> biased;  ///< with the bias, one per gamma (the bias as updated by steps 0..step-1)
};

/// @ingroup ch09
/// The bias-update stream's table.
struct BiasBalanceTable {
  std::vector<double> gammas;
  std::vector<BiasBalanceRow> rows;
  std::vector<std::vector<float>> final_bias;  ///< the bias after the last batch, per gamma
};

/// @ingroup ch09
/// Routes `batches` batches of `tokens_per_batch` skewed tokens (the same batches for every gamma)
/// with sigmoid top-k; reports the steps in `report_steps` (those below `batches`). Errors: zero
/// sizes, k not in 1..E-1, a gamma not positive, zipf_exponent negative.
BiasBalanceTable bias_balance_table(std::size_t batches, std::size_t tokens_per_batch, std::size_t num_experts,
                                    std::size_t top_k, const std::vector<double>& gammas,
                                    const std::vector<std::size_t>& report_steps, double zipf_exponent, std::uint64_t seed);

/// @ingroup ch09
/// One router on one batch.
struct RouterBalanceRow {
  std::string data;             ///< "balanced" or "skewed"
  std::size_t num_experts = 0;  ///< E
  std::string router;           ///< "top-1", "sinkhorn top-1", "expert choice c=1", "quantile k=1 (earlier batch)"
  double max_over_mean = 0.0;   ///< the busiest expert's load over the mean load
  double unrouted = 0.0;        ///< tokens with no expert / N
  std::size_t iterations = 0;   ///< Sinkhorn's iterations (tolerance 1e-6); 0 for the others
};

/// @ingroup ch09
/// The routers of this chapter side by side on `tokens` tokens, balanced and skewed data, each E.
/// Errors: tokens below 2, an empty list, E < 2, zipf_exponent negative.
std::vector<RouterBalanceRow> router_balance_table(std::size_t tokens, const std::vector<std::size_t>& num_experts,
                                                   double zipf_exponent, std::uint64_t seed);

/// @ingroup ch09
/// The balance objectives at all-zero logits, beside a balanced and a skewed random router.
struct UniformBalance {
  std::size_t num_experts = 0, top_k = 0;
  std::vector<double> mean_prob;        ///< \f$ P_i \f$ at zero logits (each 1/E)
  double aux_k_normalised = 0.0;        ///< \f$ L_{aux} \f$ (alpha 1) at zero logits: 1
  double aux_mixtral = 0.0;             ///< the same in Mixtral's normalisation: k
  double z_loss = 0.0;                  ///< \f$ L_z \f$ at zero logits: \f$ (\ln E)^2 \f$
  double aux_balanced_router = 0.0;     ///< \f$ L_{aux} \f$ (k-normalised) of a random balanced router's own routing
  double aux_skewed_router = 0.0;       ///< the same for the skewed router
};

/// @ingroup ch09
/// The table above for `tokens` tokens. Errors: tokens zero, E < 2, k not in 1..E-1, zipf_exponent
/// negative.
UniformBalance uniform_logits_balance(std::size_t tokens, std::size_t num_experts, std::size_t top_k, double zipf_exponent,
                                      std::uint64_t seed);

}  // namespace tvlab::analysis
