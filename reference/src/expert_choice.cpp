#include "tvlab/ref/expert_choice.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/ref/moe_capacity.hpp"
#include "tvlab/ref/moe_router.hpp"

namespace tvlab::ref {

Routing route_expert_choice(const Tensor2& logits, double capacity_factor) {
  const char* fn = "route_expert_choice";
  require_finite_logits(fn, logits);
  const std::size_t tokens = logits.shape()[0], num_experts = logits.shape()[1];
  require(std::isfinite(capacity_factor) && capacity_factor > 0.0, fn, "capacity_factor (", capacity_factor,
          ") must be positive and finite");
  // C = ceil(n / E * c)
  const std::size_t capacity = expert_capacity(tokens, num_experts, capacity_factor);
  require(capacity <= tokens, fn, "capacity_factor (", capacity_factor, ") gives a capacity of ", capacity,
          " tokens per expert, more than the ", tokens, " tokens");
  // S = softmax(z) over the experts, per token (largest logit subtracted: no overflow)
  std::vector<std::vector<double>> s(tokens);
  for (std::size_t t = 0; t < tokens; ++t) softmax_row(logits, t, s[t]);
  // each expert e: the C tokens of largest S[t, e], ties to the lower token
  std::vector<std::vector<bool>> chosen(tokens, std::vector<bool>(num_experts, false));
  std::vector<std::size_t> order(tokens);
  for (std::size_t e = 0; e < num_experts; ++e) {
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return s[a][e] > s[b][e]; });
    for (std::size_t j = 0; j < capacity; ++j) chosen[order[j]][e] = true;
  }
  // the assignments, token by token, gate = S[t, e]
  Routing r;
  r.tokens = tokens;
  r.num_experts = num_experts;
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t e = 0; e < num_experts; ++e)
      if (chosen[t][e]) {
        r.token.push_back(t);
        r.expert.push_back(e);
        r.gate.push_back(static_cast<float>(s[t][e]));
      }
  return r;
}

}  // namespace tvlab::ref
