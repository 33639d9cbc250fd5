#pragma once
/// @file
/// Chapter 09's exercises: the token-choice router, expert capacity, the auxiliary-loss-free bias.

#include <cstddef>
#include <vector>

#include "tvlab/core/moe_types.hpp"
#include "tvlab/ref/moe_capacity.hpp"
#include "tvlab/ref/moe_router.hpp"

namespace tvlab::student {

/// @ingroup ch09
/// Exercise 09.1: same contract as `tvlab::ref::route_top_k`.
Routing route_top_k(const Tensor2& logits, const ref::RouterConfig& cfg, const std::vector<float>& bias);

/// @ingroup ch09
/// Exercise 09.2: same contract as `tvlab::ref::apply_capacity`.
Routing apply_capacity(const Routing& r, std::size_t capacity, ref::CapacityPriority priority);

/// @ingroup ch09
/// Exercise 09.3: same contract as `tvlab::ref::update_bias`.
std::vector<float> update_bias(const std::vector<float>& bias, const std::vector<std::size_t>& load, float gamma);

}  // namespace tvlab::student
