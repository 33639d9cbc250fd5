#pragma once
/// @file
/// The MoE layer's gradient on the CPU (chapter 09): `tvlab::ref::moe_layer_backward`'s formulas,
/// with the tokens grouped by expert as in the forward pass (`opt::moe_experts`) so that every
/// step is a matrix–matrix product over one expert's rows X (n rows):
/// \f$ H_1 = X W_1,\ H_2 = X W_2,\ H = \mathrm{SiLU}(H_1) \odot H_2,\ O = H W_3 \f$ recomputed (not stored by the
/// forward pass), \f$ \Delta = \mathrm{diag}(g)\, dY \f$, then \f$ \partial W_3 = H^\top \Delta \f$, \f$ \partial H = \Delta W_3^\top \f$,
/// \f$ \partial W_1 = X^\top \partial H_1 \f$, \f$ \partial W_2 = X^\top \partial H_2 \f$ and \f$ \partial X = \partial H_1 W_1^\top + \partial H_2 W_2^\top \f$: seven
/// SGEMMs per expert. The gates' gradients are the row dot products \f$ O \cdot dY \f$; the router's are
/// two more SGEMMs over all tokens. Threads take whole experts (two blocks of one expert would add
/// into the same \f$ \partial W \f$), the largest first.

#include <vector>

#include "tvlab/core/moe_types.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/moe_backward.hpp"
#include "tvlab/ref/moe_router.hpp"

namespace tvlab::opt {

/// @ingroup ch09
/// Same contract and errors as `ref::moe_layer_backward`; float accumulation.
ref::MoeGrads moe_layer_backward(const Tensor2& x, const MoeWeights& w, const ref::RouterConfig& cfg, const std::vector<float>& bias,
                                 const Tensor2& dy);

}  // namespace tvlab::opt
