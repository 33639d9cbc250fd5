#pragma once
/// @file
/// Chapter 09, the mixture-of-experts layer (004 L151–L165; 000 L295–L305): a router sends each
/// token to a few of E feed-forward experts, and the layer's output is their gate-weighted sum,
/// \f[ y_t = \sum_{i \in T(x_t)} g_i(x_t)\, \mathrm{Expert}_i(x_t) + \sum_{s} \mathrm{Shared}_s(x_t), \f]
/// with each expert a SwiGLU FFN (chapter 01),
/// \f$ \mathrm{Expert}_i(x) = \big(\mathrm{SiLU}(x W_1^{(i)}) \odot x W_2^{(i)}\big) W_3^{(i)} \f$. It replaces the FFN
/// of a Transformer block; the parameters grow with E, the work per token only with k (004 L153).
///
/// The reference is the definition in plain loops: for each assignment (token t, expert e, gate g)
/// of the routing, in order, run expert e on \f$ x_t \f$ and add g times its output to \f$ y_t \f$; then the
/// shared experts. Sums in double, one token at a time. A token with no assignment (dropped by a
/// capacity limit, or chosen by no expert) gets only the shared experts' output: the residual
/// connection around the layer carries it on unchanged.

#include <vector>

#include "tvlab/core/moe_types.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/moe_router.hpp"

namespace tvlab::ref {

/// @ingroup ch09
/// y `[tokens, d_model]` for x `[tokens, d_model]` routed by r (the formula above). Errors: the
/// weights' and routing's checks (`validate_moe`, `validate_routing`).
Tensor2 moe_experts(const Tensor2& x, const MoeWeights& w, const Routing& r);

/// @ingroup ch09
/// The whole layer: logits \f$ x W_g \f$, `route_top_k` with cfg (and the selection bias, if any),
/// then `moe_experts`. Errors: those of the three, and cfg.num_experts not the number of experts.
Tensor2 moe_layer(const Tensor2& x, const MoeWeights& w, const RouterConfig& cfg, const std::vector<float>& bias = {});

/// @ingroup ch09
/// The router's logits \f$ x W_g \f$ `[tokens, E]`, in double rounded once. Errors: those of `validate_moe`.
Tensor2 router_logits(const Tensor2& x, const MoeWeights& w);

}  // namespace tvlab::ref
