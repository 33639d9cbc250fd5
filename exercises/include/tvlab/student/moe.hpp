#pragma once
/// @file
/// Chapter 09's exercises: the token-choice router.

#include <vector>

#include "tvlab/core/moe_types.hpp"
#include "tvlab/ref/moe_router.hpp"

namespace tvlab::student {

/// @ingroup ch09
/// Exercise 09.1: same contract as `tvlab::ref::route_top_k`.
Routing route_top_k(const Tensor2& logits, const ref::RouterConfig& cfg, const std::vector<float>& bias);

}  // namespace tvlab::student
