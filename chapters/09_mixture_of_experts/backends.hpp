#pragma once
/// @file
/// Chapter 09's backend registry (see `chapters/common/backend.hpp`): every implementation of the
/// chapter's functions, the token-choice router and the experts' part of the MoE layer, with what
/// it needs.

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "../common/backend.hpp"
#include "tvlab/core/moe_types.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/moe_backward.hpp"
#include "tvlab/ref/moe_capacity.hpp"
#include "tvlab/ref/moe_router.hpp"

namespace tvlab::moe {

/// Logits `[tokens, E]` into k assignments per token. (`ref::route_top_k`'s contract.)
using RouteFn = std::function<Routing(const Tensor2& logits, const ref::RouterConfig& cfg, const std::vector<float>& bias)>;
/// The experts' weighted sum for a routing. (`ref::moe_experts`'s contract.)
using ExpertsFn = std::function<Tensor2(const Tensor2& x, const MoeWeights& w, const Routing& r)>;
/// The layer's gradients. (`ref::moe_layer_backward`'s contract.)
using BackwardFn = std::function<ref::MoeGrads(const Tensor2& x, const MoeWeights& w, const ref::RouterConfig& cfg,
                                               const std::vector<float>& bias, const Tensor2& dy)>;
/// The whole layer: router, routing, experts. (`ref::moe_layer`'s contract.)
using LayerFn =
    std::function<Tensor2(const Tensor2& x, const MoeWeights& w, const ref::RouterConfig& cfg, const std::vector<float>& bias)>;
/// At most C assignments per expert, the rest dropped. (`ref::apply_capacity`'s contract.)
using CapacityFn = std::function<Routing(const Routing& r, std::size_t capacity, ref::CapacityPriority priority)>;
/// One step of the auxiliary-loss-free bias update. (`ref::update_bias`'s contract.)
using BiasUpdateFn = std::function<std::vector<float>(const std::vector<float>& bias, const std::vector<std::size_t>& load, float gamma)>;

struct Backend {
  std::string name;
  BackendKind kind = BackendKind::reference;
  Capabilities caps;
  RouteFn route_top_k;      ///< the token-choice router (exercise 09.1; empty: not provided)
  ExpertsFn moe_experts;    ///< the experts' part of the layer (empty: not provided)
  LayerFn moe_layer;        ///< the whole layer (empty: not provided)
  BackwardFn moe_layer_backward;  ///< the layer's gradients (empty: not provided)
  CapacityFn apply_capacity;  ///< token dropping at a capacity (exercise 09.2; empty: not provided)
  BiasUpdateFn update_bias;   ///< DeepSeek-V3's bias step (exercise 09.3; empty: not provided)
};

/// ref, opt, cuda, student.
const std::vector<Backend>& backends();

/// gtest prints a parameter through PrintTo: the backend's name, not its contents.
inline void PrintTo(const Backend& b, std::ostream* out) { *out << b.name; }

}  // namespace tvlab::moe
