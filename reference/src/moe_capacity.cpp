#include "tvlab/ref/moe_capacity.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"

namespace tvlab::ref {

std::size_t expert_capacity(std::size_t tokens, std::size_t num_experts, double capacity_factor) {
  const char* fn = "expert_capacity";
  require_positive(fn, "tokens", tokens);
  require_positive(fn, "num_experts", num_experts);
  require(std::isfinite(capacity_factor) && capacity_factor > 0.0, fn, "capacity_factor (", capacity_factor,
          ") must be positive and finite");
  // C = ceil(tokens / E * cf). A factor such as 1.1 is stored slightly above its decimal value, so
  // a product that should be an integer may exceed it by a few ulps: within 8 ulps it is that integer.
  const double q = static_cast<double>(tokens) * capacity_factor / static_cast<double>(num_experts);
  const double nearest = std::round(q);
  if (std::fabs(q - nearest) <= 8.0 * std::numeric_limits<double>::epsilon() * std::max(1.0, q))
    return static_cast<std::size_t>(nearest);
  return static_cast<std::size_t>(std::ceil(q));
}

Routing apply_capacity(const Routing& r, std::size_t capacity, CapacityPriority priority) {
  const char* fn = "apply_capacity";
  validate_routing(fn, r, r.tokens, r.num_experts);
  require_positive(fn, "capacity", capacity);
  // rank[a]: the position of assignment a among its token's assignments (0 = its first choice)
  std::vector<std::size_t> rank(r.size()), seen(r.tokens, 0);
  std::size_t max_rank = 0;
  for (std::size_t a = 0; a < r.size(); ++a) {
    rank[a] = seen[r.token[a]]++;
    max_rank = std::max(max_rank, rank[a]);
  }
  // Visit the assignments in priority order and fill each expert's C slots.
  //   position:    a = 0, 1, 2, ...                      (Switch)
  //   choice_rank: rank 0 in list order, then rank 1, ... (GShard)
  std::vector<bool> keep(r.size(), false);
  std::vector<std::size_t> used(r.num_experts, 0);
  const std::size_t passes = priority == CapacityPriority::position ? 1 : max_rank + 1;
  for (std::size_t pass = 0; pass < passes; ++pass) {
    for (std::size_t a = 0; a < r.size(); ++a) {
      if (priority == CapacityPriority::choice_rank && rank[a] != pass) continue;
      if (used[r.expert[a]] < capacity) {
        ++used[r.expert[a]];
        keep[a] = true;
      }
    }
  }
  // the kept assignments, in the routing's order; the rest are counted as dropped
  Routing out;
  out.tokens = r.tokens;
  out.num_experts = r.num_experts;
  out.dropped = r.dropped;
  for (std::size_t a = 0; a < r.size(); ++a) {
    if (!keep[a]) {
      ++out.dropped;
      continue;
    }
    out.token.push_back(r.token[a]);
    out.expert.push_back(r.expert[a]);
    out.gate.push_back(r.gate[a]);
  }
  return out;
}

std::size_t unrouted_tokens(const Routing& r) {
  std::vector<bool> routed(r.tokens, false);
  for (std::size_t t : r.token)
    if (t < r.tokens) routed[t] = true;
  std::size_t count = 0;
  for (bool b : routed) count += b ? 0 : 1;
  return count;
}

}  // namespace tvlab::ref
