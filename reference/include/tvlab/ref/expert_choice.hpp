#pragma once
/// @file
/// Chapter 09, expert-choice routing (004 L173; Zhou et al. 2022, "Mixture-of-Experts with Expert
/// Choice Routing", section 3.1): the experts choose the tokens, not the other way round.
///
/// With logits z `[n, E]` for a batch of n tokens:
/// 1. **scores** \f$ S = \mathrm{softmax}(z) \f$ over the experts, one row per token (the paper's
///    \f$ S = \mathrm{Softmax}(X \cdot W_g) \f$);
/// 2. **capacity** \f$ C = n c / E \f$, with c the capacity factor: "on average how many experts are
///    utilized by a token" (the paper's k = n × c / e); here rounded up, \f$ C = \lceil n / E \cdot c \rceil \f$
///    (`expert_capacity`), which is the paper's value whenever n c / E is an integer;
/// 3. **selection**: each expert e takes the C tokens of largest \f$ S_{te} \f$ (the paper's
///    TopK(S^T, k); ties: the lower token), with gate \f$ g = S_{te} \f$.
///
/// Every expert gets exactly C tokens: the load is balanced by construction, with no auxiliary loss
/// and nothing dropped. The price: a token may be chosen by many experts or by none (its output from
/// the routed experts is then 0, the residual carries it), and choosing needs the whole batch, a
/// sort down each column, so it does not fit token-by-token autoregressive decoding (004 L173:
/// "needs a global sort").

#include <cstddef>

#include "tvlab/core/moe_types.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch09
/// Routes logits `[tokens, E]` by expert choice with capacity factor c: C assignments per expert,
/// listed by token, and within a token by expert. Errors: empty or non-finite logits (named with
/// the token), capacity_factor not positive and finite, or so large that C exceeds the tokens.
Routing route_expert_choice(const Tensor2& logits, double capacity_factor);

}  // namespace tvlab::ref
