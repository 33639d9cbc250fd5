#pragma once
// Chapter 09's tests: a random MoE layer of given shape, its weights drawn in a fixed order from one
// generator (router, then each routed expert's w1, w2, w3, then each shared expert's).

#include <cstddef>

#include "tvlab/core/moe_types.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::moe {

// router ~ N(0, router_std^2); every expert matrix ~ N(0, weight_std^2); shared experts of width shared_d_ff
inline MoeWeights random_moe_layer(Rng& rng, std::size_t d_model, std::size_t d_ff, std::size_t experts, std::size_t shared,
                                   std::size_t shared_d_ff, double router_std, double weight_std) {
  MoeWeights w;
  w.router = rng.normal_matrix(d_model, experts, 0.0, router_std);
  auto expert = [&](std::size_t f) {
    return SwigluWeights{rng.normal_matrix(d_model, f, 0.0, weight_std), rng.normal_matrix(d_model, f, 0.0, weight_std),
                         rng.normal_matrix(f, d_model, 0.0, weight_std)};
  };
  for (std::size_t e = 0; e < experts; ++e) w.experts.push_back(expert(d_ff));
  for (std::size_t s = 0; s < shared; ++s) w.shared.push_back(expert(shared_d_ff));
  return w;
}

}  // namespace tvlab::moe
