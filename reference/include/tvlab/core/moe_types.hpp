#pragma once
/// @file
/// Types shared by every mixture-of-experts implementation (chapter 09): a layer's weights and a
/// routing decision, with their checks.
///
/// A routing decision is a list of **assignments** (token t, expert e, gate g): the layer's output
/// for token t is \f$ y_t = \sum_{a:\,t_a = t} g_a\, \mathrm{Expert}_{e_a}(x_t) \f$ (plus the shared experts,
/// which every token passes through). Token-choice routers (top-k) give each token up to k
/// assignments (fewer when capacity drops some); expert choice gives each expert C of them, so a
/// token may have none or many. One list serves both.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tvlab/core/ffn_types.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab {

/// An MoE layer: the router \f$ W_g \f$ `router` `[d_model, E]` (logits \f$ x W_g \f$), E routed SwiGLU
/// experts (chapter 01's `SwigluWeights`: `w1` gate and `w2` up `[d_model, d_ff]`, `w3` down
/// `[d_ff, d_model]`; every routed expert the same d_ff) and the shared experts, which every token
/// passes through with weight 1 (DeepSeekMoE; empty for Mixtral and Switch; their d_ff may differ from
/// the routed experts').
struct MoeWeights {
  Tensor2 router;
  std::vector<SwigluWeights> experts;
  std::vector<SwigluWeights> shared;
};

/// Where each token goes: assignment a sends token `token[a]` to expert `expert[a]` with weight
/// `gate[a]`, for `tokens` tokens and `num_experts` experts. `dropped` counts the token–expert
/// choices a capacity limit removed (they are not in the list: their tokens pass the residual
/// connection unchanged).
struct Routing {
  std::size_t tokens = 0, num_experts = 0;
  std::vector<std::size_t> token;
  std::vector<std::size_t> expert;
  std::vector<float> gate;
  std::size_t dropped = 0;
  /// The number of assignments.
  std::size_t size() const { return token.size(); }
};

/// Checks an MoE layer's weights against x `[tokens, d_model]`: at least one routed expert, a
/// router of E columns, every expert's shapes (named `experts[i]` or `shared[i]`), all routed
/// experts of one d_ff, and, with `scan_values`, finite values in x and every weight (an optimized
/// layer skips that pass over all the weights, checks its output instead, and calls this with the
/// scan for the message when the output is not finite). Returns the routed experts' d_ff.
std::size_t validate_moe(const char* function, const Tensor2& x, const MoeWeights& w, bool scan_values = true);

/// Checks a routing decision for `tokens` tokens and `num_experts` experts: equal list lengths,
/// every token and expert index in range, finite gates.
void validate_routing(const char* function, const Routing& r, std::size_t tokens, std::size_t num_experts);

/// Checks router logits `[tokens, E]`: not empty, every logit finite (an error naming the token and
/// the expert otherwise). Every router starts with it.
void require_finite_logits(const char* function, const Tensor2& logits);

/// Tokens per expert: `load[e]` = the number of assignments to expert e.
std::vector<std::size_t> expert_load(const Routing& r);

}  // namespace tvlab
