#include "tvlab/ref/quantile_router.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "tvlab/core/error.hpp"
#include "tvlab/ref/moe_capacity.hpp"
#include "tvlab/ref/moe_router.hpp"

namespace tvlab::ref {
namespace {

// s = softmax(z) per token, in double, after the logits' checks
std::vector<std::vector<double>> softmax_scores(const char* fn, const Tensor2& logits) {
  require_finite_logits(fn, logits);
  const std::size_t n = logits.shape()[0];
  std::vector<std::vector<double>> s(n);
  for (std::size_t t = 0; t < n; ++t) softmax_row(logits, t, s[t]);
  return s;
}

}  // namespace

std::vector<double> quantile_thresholds(const Tensor2& logits, std::size_t top_k) {
  const char* fn = "quantile_thresholds";
  const std::vector<std::vector<double>> s = softmax_scores(fn, logits);
  const std::size_t n = logits.shape()[0], num_experts = logits.shape()[1];
  require(top_k >= 1 && top_k < num_experts, fn, "top_k (", top_k, ") must be at least 1 and below the ", num_experts, " experts");
  // each expert's share: m = ceil(N / E * k) tokens (at most N)
  const std::size_t m = std::min(n, expert_capacity(n, num_experts, static_cast<double>(top_k)));
  // tau_e = the m-th largest score of column e
  std::vector<double> tau(num_experts), column(n);
  for (std::size_t e = 0; e < num_experts; ++e) {
    for (std::size_t t = 0; t < n; ++t) column[t] = s[t][e];
    std::nth_element(column.begin(), column.begin() + (m - 1), column.end(), std::greater<>());
    tau[e] = column[m - 1];
  }
  return tau;
}

Routing route_quantile(const Tensor2& logits, const std::vector<double>& thresholds) {
  const char* fn = "route_quantile";
  const std::vector<std::vector<double>> s = softmax_scores(fn, logits);
  const std::size_t n = logits.shape()[0], num_experts = logits.shape()[1];
  require(thresholds.size() == num_experts, fn, "thresholds has ", thresholds.size(), " values, expected one per expert (",
          num_experts, ")");
  for (std::size_t e = 0; e < num_experts; ++e)
    require(std::isfinite(thresholds[e]), fn, "thresholds[", e, "] is not finite (", thresholds[e], ")");
  // token t -> expert e whenever s_te >= tau_e
  Routing r;
  r.tokens = n;
  r.num_experts = num_experts;
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t e = 0; e < num_experts; ++e)
      if (s[t][e] >= thresholds[e]) {
        r.token.push_back(t);
        r.expert.push_back(e);
        r.gate.push_back(static_cast<float>(s[t][e]));
      }
  return r;
}

}  // namespace tvlab::ref
