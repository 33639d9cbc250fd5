#pragma once
/// @file
/// Chapter 09, the gradient of the MoE layer (`ref::moe_layer`) with respect to its input, its
/// router and every expert, for a loss whose gradient with respect to the output is dy.
///
/// The choice of the top k is a step function of the logits: it has no gradient, and small changes
/// of the logits leave it unchanged. Everything else is smooth, so for a fixed choice:
/// - each assignment a = (t, e, g) passes \f$ g\,\partial L/\partial y_t \f$ back through expert e on \f$ x_t \f$. With
///   \f$ h_1 = x W_1 \f$, \f$ h_2 = x W_2 \f$, \f$ h = \mathrm{SiLU}(h_1) \odot h_2 \f$, \f$ o = h W_3 \f$ and \f$ \delta = g\, \partial L / \partial y_t \f$:
///   \f[ \partial W_3 \mathrel{+}= h^\top \delta,\quad \partial h = \delta W_3^\top,\quad \partial h_1 = \partial h \odot h_2 \odot \mathrm{SiLU}'(h_1),\quad \partial h_2 = \partial h \odot \mathrm{SiLU}(h_1), \f]
///   \f[ \partial W_1 \mathrel{+}= x^\top \partial h_1,\quad \partial W_2 \mathrel{+}= x^\top \partial h_2,\quad \partial x_t \mathrel{+}= \partial h_1 W_1^\top + \partial h_2 W_2^\top, \f]
///   with \f$ \mathrm{SiLU}'(u) = \sigma(u)\,(1 + u\,(1 - \sigma(u))) \f$; the shared experts the same with g = 1;
/// - the gate gets \f$ \partial g_a = \partial L / \partial y_t \cdot \mathrm{Expert}_e(x_t) \f$; through the renormalisation
///   \f$ g_j = \rho\, s_j / S \f$ (\f$ S = \sum_{k \in K} s_k \f$ over the chosen K, \f$ \rho \f$ the scaling factor)
///   \f$ \partial s_i = \rho\,(\partial g_i / S - \sum_{j \in K} \partial g_j\, s_j / S^2) \f$ for i in K, 0 elsewhere (without
///   renormalisation \f$ \partial s_i = \rho\, \partial g_i \f$); through the softmax
///   \f$ \partial z'_i = s_i (\partial s_i - \sum_j s_j\, \partial s_j) \f$, or the sigmoid \f$ \partial z'_i = \partial s_i\, s_i (1 - s_i) \f$;
///   through the temperature \f$ \partial z = \partial z' / \tau \f$, and clipping passes the gradient only where the
///   logit is inside \f$ (-c, c) \f$;
/// - the router: \f$ \partial W_g = x^\top \partial z \f$ and \f$ \partial x \mathrel{+}= \partial z\, W_g^\top \f$.
///
/// The selection bias enters only the choice, so it gets no gradient (DeepSeek-V3 updates it by a
/// rule, not by descent). Sums in double.

#include <vector>

#include "tvlab/core/moe_types.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/moe_router.hpp"

namespace tvlab::ref {

/// @ingroup ch09
/// The gradients of one SwiGLU expert's three matrices.
struct SwigluGrads {
  Tensor2 w1, w2, w3;
};

/// @ingroup ch09
/// The gradients of an MoE layer: its input, its router and each expert (zeros for an expert no
/// token visited).
struct MoeGrads {
  Tensor2 x;
  Tensor2 router;
  std::vector<SwigluGrads> experts, shared;
};

/// @ingroup ch09
/// The gradients above for `moe_layer(x, w, cfg, bias)` and dy `[tokens, d_model]`. Errors: those of
/// `moe_layer`, and dy of another shape or not finite.
MoeGrads moe_layer_backward(const Tensor2& x, const MoeWeights& w, const RouterConfig& cfg, const std::vector<float>& bias,
                            const Tensor2& dy);

}  // namespace tvlab::ref
