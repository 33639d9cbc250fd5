#pragma once
/// @file
/// Chapter 09, keeping the experts evenly loaded (004 L153, L167–L169, L175, L179): two training
/// losses on the router and DeepSeek-V3's loss-free alternative.
///
/// **Auxiliary load-balancing loss** (004 L153; Switch Transformer, Fedus et al. 2021, equations
/// 4–6). For N tokens with router probabilities \f$ p = \mathrm{softmax}(z) \f$ `[N, E]` and a routing of k
/// choices per token,
/// \f[ L_{aux} = \alpha\, E \sum_{i=1}^{E} f_i P_i, \qquad P_i = \frac1N \sum_t p_{ti}, \f]
/// with \f$ f_i \f$ the fraction of the tokens' choices that go to expert i. Two normalisations are in use:
/// - `k_normalised`: \f$ f_i = \mathrm{load}_i / (k N) \f$, so \f$ \sum_i f_i = 1 \f$ and a uniform router
///   (\f$ P_i = 1/E \f$) gives \f$ L_{aux} = \alpha \f$ exactly, whatever k (Switch's k = 1 form, and Megatron's
///   `switch_load_balancing_loss_func`, which divides by `topk`);
/// - `mixtral`: \f$ f_i = \mathrm{load}_i / N \f$, the fraction of tokens that chose i, which sums to k and
///   gives \f$ \alpha k \f$ for a uniform router (Hugging Face's `load_balancing_loss_func` in
///   modeling_mixtral.py: `tokens_per_expert = mean(one_hot(selected_experts))` over the tokens, shape
///   `[k, E]`, times `router_prob_per_expert`, summed, times `num_experts`; the coefficient
///   `router_aux_loss_coef` is applied by the caller).
///
/// Its gradient with respect to the logits treats f as a constant: f counts a top-k choice, which
/// is piecewise constant in z (its derivative is 0 almost everywhere and undefined at the jumps), and
/// the implementations build it from a one-hot mask that carries no gradient. The loss reaches the
/// router through P alone: with \f$ \partial p_{ti} / \partial z_{tj} = p_{ti}(\delta_{ij} - p_{tj}) \f$,
/// \f[ \frac{\partial L_{aux}}{\partial z_{tj}} = \frac{\alpha E}{N}\, p_{tj} \Big( f_j - \sum_i f_i p_{ti} \Big), \f]
/// which lowers the probability of the experts with more than their share of the load.
///
/// **Router z-loss** (004 L167–L169; ST-MoE, Zoph et al. 2022, equation 5): the squared log-partition
/// function of each token's logits,
/// \f[ L_z = \frac1N \sum_t \Big( \log \sum_j e^{z_{tj}} \Big)^2, \qquad \frac{\partial L_z}{\partial z_{tj}} = \frac2N \Big( \log \sum_i e^{z_{ti}} \Big)\, p_{tj}, \f]
/// which pulls the logits toward small values, where the softmax is far from saturation and
/// bfloat16 round-off small. All-zero logits give \f$ (\ln E)^2 \f$. (The coefficient \f$ \lambda_z \f$, 0.001 in
/// ST-MoE, is applied by the caller.)
///
/// **Auxiliary-loss-free balancing** (004 L175, L179; DeepSeek-V3 technical report, section 2.1.2;
/// Wang et al. 2024, "Auxiliary-Loss-Free Load Balancing Strategy for Mixture-of-Experts"): a bias
/// \f$ b_i \f$ added to the scores for choosing only (`route_top_k`'s `bias`), updated after each batch
/// from the load, with no gradient:
/// \f[ b_i \leftarrow b_i + \gamma\, \mathrm{sign}(\bar{L} - L_i), \qquad \bar{L} = \frac1E \sum_j L_j, \f]
/// so an overloaded expert's bias falls by \f$ \gamma \f$, an underloaded one's rises, and an expert exactly at
/// the mean keeps its bias (sign 0). DeepSeek-V3 used \f$ \gamma = 0.001 \f$ for most of its training.

#include <cstddef>
#include <vector>

#include "tvlab/core/moe_types.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch09
/// How \f$ f_i \f$ is normalised in the auxiliary loss.
enum class AuxLossNorm {
  k_normalised,  ///< \f$ f_i = \mathrm{load}_i / (kN) \f$: uniform routing gives \f$ \alpha \f$
  mixtral,       ///< \f$ f_i = \mathrm{load}_i / N \f$ (Hugging Face Mixtral): uniform routing gives \f$ \alpha k \f$
};

/// @ingroup ch09
/// The router probabilities' means \f$ P_i = \frac1N \sum_t \mathrm{softmax}(z_t)_i \f$ `[E]` of logits `[N, E]`.
/// Errors: empty or non-finite logits.
std::vector<double> mean_router_probability(const Tensor2& logits);

/// @ingroup ch09
/// The fractions \f$ f_i \f$ `[E]` of a routing with k choices per token, in the chosen normalisation.
/// Errors: a routing that fails `validate_routing`, top_k zero.
std::vector<double> routed_fraction(const Routing& r, std::size_t top_k, AuxLossNorm norm);

/// @ingroup ch09
/// \f$ L_{aux} = \alpha E \sum_i f_i P_i \f$ for logits `[N, E]` and their routing r (k choices per token).
/// Errors: those of the two functions above, a routing of another N or E, alpha not finite.
double load_balancing_loss(const Tensor2& logits, const Routing& r, std::size_t top_k, double alpha,
                           AuxLossNorm norm = AuxLossNorm::k_normalised);

/// @ingroup ch09
/// \f$ \partial L_{aux} / \partial z \f$ `[N, E]` with f held constant (the formula above). Errors: those of
/// `load_balancing_loss`.
DTensor2 load_balancing_loss_grad(const Tensor2& logits, const Routing& r, std::size_t top_k, double alpha,
                                  AuxLossNorm norm = AuxLossNorm::k_normalised);

/// @ingroup ch09
/// \f$ L_z = \frac1N \sum_t (\log \sum_j e^{z_{tj}})^2 \f$ for logits `[N, E]`. Errors: empty or non-finite logits.
double router_z_loss(const Tensor2& logits);

/// @ingroup ch09
/// \f$ \partial L_z / \partial z \f$ `[N, E]`. Errors: those of `router_z_loss`.
DTensor2 router_z_loss_grad(const Tensor2& logits);

/// @ingroup ch09
/// One step of the auxiliary-loss-free update: \f$ b_i + \gamma\, \mathrm{sign}(\bar{L} - L_i) \f$ for the bias `[E]` and
/// the batch's load `[E]` (`expert_load` of its routing). Errors: empty or mismatched lengths, a bias
/// that is not finite, gamma not positive and finite.
std::vector<float> update_bias(const std::vector<float>& bias, const std::vector<std::size_t>& load, float gamma);

}  // namespace tvlab::ref
