#pragma once
/// @file
/// Chapter 09 on the GPU, host tensors in and out: the MoE layer's experts as the optimized CPU
/// version does them (tokens grouped by expert, three cuBLAS SGEMMs per expert over its rows, the
/// outputs combined back by token, weighted by their gates), and the top-k router, one warp per
/// token. The grouping (a counting sort, `opt::group_by_expert`) is done on the host and uploaded
/// with the rows' token indices; the gather, the products, the SwiGLU combination and the
/// weighted combine run on the device.

#include <vector>

#include "tvlab/core/moe_types.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/moe_router.hpp"

namespace tvlab::cuda {

/// @ingroup ch09
/// `ref::moe_experts` on the device: same contract and errors (the reference's checks, made on
/// the host before any device call); float accumulation.
Tensor2 moe_experts(const Tensor2& x, const MoeWeights& w, const Routing& r);

/// @ingroup ch09
/// `ref::moe_layer` on the device: the router's logits \f$ x W_g \f$ by cuBLAS, `route_top_k` and
/// `moe_experts` below. Same contract and errors (checked on the host before any device call).
Tensor2 moe_layer(const Tensor2& x, const MoeWeights& w, const ref::RouterConfig& cfg, const std::vector<float>& bias);

/// @ingroup ch09
/// `ref::route_top_k` on the device, in double: the same experts and gates (to float rounding).
/// Errors: the reference's, more than 1024 experts or 64 groups. One warp per token, the experts
/// spread over its lanes, the maxima and sums by shuffles.
Routing route_top_k(const Tensor2& logits, const ref::RouterConfig& cfg, const std::vector<float>& bias);

}  // namespace tvlab::cuda
