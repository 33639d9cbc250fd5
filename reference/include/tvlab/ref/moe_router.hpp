#pragma once
/// @file
/// Chapter 09, token-choice routing (004 L151–L153, L173–L175; 000 L305–L307): each token scores
/// every expert and goes to the k best, the policies of Mixtral, Switch, GShard, Qwen and
/// DeepSeek-V3 as one function with its options named as in Hugging Face's configs.
///
/// With router logits \f$ z = x W_g \f$ `[tokens, E]`, for each token:
/// 1. **clip and temperature**: \f$ z \leftarrow \mathrm{clamp}(z, -c, c) / \tau \f$ (c = `logit_clip`, 0 for none;
///    \f$ \tau \f$ = `temperature`; 004 L173, L181);
/// 2. **scores**: \f$ s = \mathrm{softmax}(z) \f$ over the E experts (Mixtral, Switch, Qwen), or
///    \f$ s_i = \sigma(z_i) \f$ (DeepSeek-V3's affinities);
/// 3. **selection**: the k experts of largest \f$ s_i + b_i \f$, where b is the auxiliary-loss-free bias
///    (DeepSeek-V3; empty for none), used for choosing only, never in the gates. With `n_group` > 1
///    the experts form n_group equal groups, each group scores the sum of its two largest
///    \f$ s_i + b_i \f$, and only the experts of the `topk_group` best groups can be chosen (DeepSeek-V3's
///    node-limited routing). Ties go to the lower index;
/// 4. **gates**: \f$ g = s \f$ of the chosen experts, renormalised to sum 1 when `norm_topk_prob`
///    (\f$ g_i / \sum_{j \in \mathrm{top}k} g_j \f$), then times `routed_scaling_factor`.
///
/// Mixtral computes the softmax over the k chosen *logits*; since softmax is monotonic the chosen
/// experts are the same, and \f$ e^{z_i} / \sum_{j \in \mathrm{top}k} e^{z_j} \f$ is exactly the renormalised
/// \f$ s_i / \sum_{j \in \mathrm{top}k} s_j \f$ (the full softmax's denominator cancels): the two orders are one
/// router, as the tests show. Switch is k = 1 without renormalisation (the gate is the
/// probability itself, so the router still learns through it).

#include <cstddef>
#include <vector>

#include "tvlab/core/moe_types.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch09
/// How the scores are made from the logits.
enum class GateScore {
  softmax,  ///< \f$ \mathrm{softmax}(z) \f$ over the experts (Mixtral, Switch, GShard, Qwen)
  sigmoid,  ///< \f$ \sigma(z_i) \f$ per expert (DeepSeek-V3)
};

/// @ingroup ch09
/// A token-choice router, in Hugging Face's names.
struct RouterConfig {
  std::size_t num_experts = 8;        ///< E
  std::size_t top_k = 2;              ///< k (`num_experts_per_tok`)
  GateScore score = GateScore::softmax;
  bool norm_topk_prob = true;         ///< renormalise the k gates to sum 1
  float temperature = 1.0f;           ///< \f$ \tau \f$: the logits are divided by it
  float logit_clip = 0.0f;            ///< c > 0: clamp the logits to [-c, c] first; 0: no clipping
  std::size_t n_group = 1;            ///< expert groups (DeepSeek-V3: 8)
  std::size_t topk_group = 1;         ///< groups a token may use (DeepSeek-V3: 4); with n_group = 1, 1
  float routed_scaling_factor = 1.0f; ///< multiplies the gates (DeepSeek-V3: 2.5)
};

/// @ingroup ch09
/// The checks of a router configuration against E: 1 <= k < E (k = E would be a dense layer), temperature > 0, logit_clip >= 0,
/// n_group dividing E, topk_group in 1..n_group, enough experts in topk_group groups for k, a
/// positive finite scaling factor.
void validate_router(const char* function, const RouterConfig& cfg);

/// @ingroup ch09
/// z replaced by softmax(z), in double, the largest value subtracted first so that no exponential
/// overflows; returns \f$ \log \sum_j e^{z_j} \f$. No checks: every router checks its logits first.
double softmax_in_place(std::vector<double>& z);

/// @ingroup ch09
/// Row t of logits `[tokens, E]` through `softmax_in_place`: p = softmax of the row; returns its
/// log-sum-exp.
double softmax_row(const Tensor2& logits, std::size_t t, std::vector<double>& p);

/// @ingroup ch09
/// The scores s `[tokens, E]` of step 2 (after clipping and temperature). Errors: those of
/// `route_top_k`.
Tensor2 router_scores(const Tensor2& logits, const RouterConfig& cfg);

/// @ingroup ch09
/// Routes logits `[tokens, E]`: k assignments per token, in the token's order of preference (the
/// largest \f$ s + b \f$ first), tokens in order. `bias` `[E]` or empty. Errors: a bad configuration
/// (`validate_router`), logits with another number of columns than E, a logit that is not finite
/// (named with its token), a bias of another length or not finite.
Routing route_top_k(const Tensor2& logits, const RouterConfig& cfg, const std::vector<float>& bias = {});

}  // namespace tvlab::ref
