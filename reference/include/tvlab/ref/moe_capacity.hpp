#pragma once
/// @file
/// Chapter 09, expert capacity and token dropping (004 L153, L167; Switch Transformer, Fedus et al.
/// 2021, section 2.2; GShard, Lepikhin et al. 2020, Algorithm 1): an expert is a fixed-size buffer on
/// its device, so it takes at most C assignments per batch,
/// \f[ C = \Big\lceil \frac{\text{tokens}}{E} \cdot \text{capacity\_factor} \Big\rceil, \f]
/// and the assignments beyond C are **dropped**. A capacity factor of 1 leaves no slack for a
/// perfectly balanced router; 1.25 (the usual choice, 004 L153) leaves 25% of buffer.
///
/// Which assignments stay when an expert overflows is the **priority**:
/// - `position` (Switch): the earlier assignments in the routing's order, i.e. the earlier tokens;
/// - `choice_rank` (GShard): every token's first choice, in token order, before any token's second
///   choice, and so on. The rank of an assignment is its position among its token's assignments
///   (route_top_k lists them best first), so a token's best expert is served before another token's
///   second best.
///
/// A dropped assignment is removed from the routing and counted in `Routing::dropped`; the kept
/// gates are not renormalised (Switch and GShard keep them). A token whose every choice is dropped
/// has no assignment: the MoE layer gives it nothing from the routed experts, and the residual
/// connection around the layer carries its input on unchanged.
///
/// For top-k routing the buffer holds assignments, so implementations size it for the k N
/// assignments: `expert_capacity(top_k * tokens, E, cf)` (GShard's 2N/E for k = 2; DeepSpeed's
/// `top2gating`, Megatron's `get_capacity` with `num_tokens * topk`).

#include <cstddef>

#include "tvlab/core/moe_types.hpp"

namespace tvlab::ref {

/// @ingroup ch09
/// Which assignments an overflowing expert keeps.
enum class CapacityPriority {
  position,     ///< Switch: in the routing's order (earlier tokens first)
  choice_rank,  ///< GShard: all first choices (in token order), then all second choices, ...
};

/// @ingroup ch09
/// \f$ C = \lceil \text{tokens} / E \cdot \text{capacity\_factor} \rceil \f$. The product is formed in double; a
/// result within rounding of an integer is that integer (so 100 tokens, 1 expert and a factor of 1.1,
/// whose double is slightly above 1.1, give 110, not 111). Errors: tokens or num_experts zero,
/// capacity_factor not positive and finite.
std::size_t expert_capacity(std::size_t tokens, std::size_t num_experts, double capacity_factor);

/// @ingroup ch09
/// Keeps at most `capacity` assignments per expert, chosen by `priority`, in the routing's order;
/// the others are dropped (`dropped` grows by their number). Gates are unchanged. Errors: a routing
/// that fails `validate_routing`, capacity zero.
Routing apply_capacity(const Routing& r, std::size_t capacity, CapacityPriority priority);

/// @ingroup ch09
/// The tokens of r with no assignment (dropped by capacity, or chosen by no expert): their output
/// from the routed experts is 0.
std::size_t unrouted_tokens(const Routing& r);

}  // namespace tvlab::ref
