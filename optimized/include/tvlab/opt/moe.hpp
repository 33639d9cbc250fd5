#pragma once
/// @file
/// The MoE layer's experts on the CPU (chapter 09): the same sum as `tvlab::ref::moe_experts`, with
/// no per-token product. The reference runs each assignment's expert on one token, a
/// matrix–*vector* product that reads all of the expert's weights for one row; here the tokens
/// are grouped by expert so that each expert multiplies all of its tokens at once, a matrix–matrix
/// product that reads its weights once per block of rows:
/// 1. **permute**: count the assignments per expert (a counting sort, stable: each expert's rows in
///    the routing's order) and gather their token rows into one contiguous block per expert;
/// 2. **grouped GEMM**: for every expert and block of up to 256 of its rows,
///    \f$ H = \mathrm{SiLU}(X_e W_1) \odot X_e W_2 \f$ and \f$ Y_e = H W_3 \f$ (three OpenBLAS SGEMMs); the
///    (expert, block) pieces are shared among the threads dynamically, so one expert that gets half
///    the tokens does not leave the other threads idle; the shared experts are experts that every
///    token visits with gate 1;
/// 3. **un-permute and combine**: each token adds \f$ g_a Y_{e_a} \f$ over its assignments, in the
///    routing's order, threads over tokens.
///
/// The weights are not scanned for NaN before the products (a pass over all of them would cost a
/// tenth of the layer): a non-finite weight of an expert that is used makes the output non-finite,
/// and then the reference's checks run to name it. An expert no token visits is not read at all.

#include <vector>

#include "tvlab/core/moe_types.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/moe_router.hpp"

namespace tvlab::opt {

/// @ingroup ch09
/// Same contract as `ref::moe_experts`, float accumulation; errors as the reference's, except that
/// a non-finite weight in an expert no token visits is not an error (it is never read).
Tensor2 moe_experts(const Tensor2& x, const MoeWeights& w, const Routing& r);

/// @ingroup ch09
/// The whole layer, as `ref::moe_layer`: the router's logits \f$ x W_g \f$ by one SGEMM, the
/// reference's router (`ref::route_top_k`: a few operations per expert and token, a small part of
/// the layer), then `moe_experts` above.
Tensor2 moe_layer(const Tensor2& x, const MoeWeights& w, const ref::RouterConfig& cfg, const std::vector<float>& bias = {});

/// @ingroup ch09
/// The router's logits \f$ x W_g \f$ `[tokens, E]` by one SGEMM. Errors: those of `validate_moe` (shapes).
Tensor2 router_logits(const Tensor2& x, const MoeWeights& w);

}  // namespace tvlab::opt
