#include "tvlab/ref/moe_router.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "tvlab/core/error.hpp"

namespace tvlab::ref {
namespace {

// Step 1 and 2 for one token, in double: clip, divide by the temperature, softmax or sigmoid.
std::vector<double> token_scores(const Tensor2& logits, std::size_t t, const RouterConfig& cfg) {
  const std::size_t num_experts = cfg.num_experts;
  std::vector<double> z(num_experts);
  for (std::size_t e = 0; e < num_experts; ++e) {
    double v = logits(t, e);
    if (cfg.logit_clip > 0.0f) v = std::clamp(v, -static_cast<double>(cfg.logit_clip), static_cast<double>(cfg.logit_clip));
    z[e] = v / cfg.temperature;
  }
  if (cfg.score == GateScore::sigmoid) {
    for (double& v : z) v = 1.0 / (1.0 + std::exp(-v));
    return z;
  }
  softmax_in_place(z);
  return z;
}

}  // namespace

double softmax_in_place(std::vector<double>& z) {
  const double m = *std::max_element(z.begin(), z.end());
  double sum = 0.0;
  for (double& v : z) sum += v = std::exp(v - m);
  for (double& v : z) v /= sum;
  return m + std::log(sum);
}

double softmax_row(const Tensor2& logits, std::size_t t, std::vector<double>& p) {
  const std::size_t num_experts = logits.shape()[1];
  p.assign(logits.data() + t * num_experts, logits.data() + (t + 1) * num_experts);
  return softmax_in_place(p);
}

void validate_router(const char* fn, const RouterConfig& cfg) {
  require(cfg.num_experts > 0, fn, "num_experts must be positive");
  require(cfg.top_k >= 1 && cfg.top_k < cfg.num_experts, fn, "top_k (", cfg.top_k, ") must be at least 1 and below num_experts (",
          cfg.num_experts, "): with every expert chosen the layer is dense");
  require(cfg.temperature > 0.0f && std::isfinite(cfg.temperature), fn, "temperature (", cfg.temperature,
          ") must be positive");
  require(cfg.logit_clip >= 0.0f && std::isfinite(cfg.logit_clip), fn, "logit_clip (", cfg.logit_clip,
          ") must be 0 (no clipping) or positive");
  require(cfg.n_group >= 1 && cfg.num_experts % cfg.n_group == 0, fn, "n_group (", cfg.n_group,
          ") must divide num_experts (", cfg.num_experts, ")");
  require(cfg.topk_group >= 1 && cfg.topk_group <= cfg.n_group, fn, "topk_group (", cfg.topk_group, ") must be in 1..n_group (",
          cfg.n_group, ")");
  const std::size_t per_group = cfg.num_experts / cfg.n_group;
  require(cfg.n_group == 1 || per_group >= 2, fn, "n_group (", cfg.n_group, ") leaves ", per_group,
          " expert per group: a group's score is the sum of its two best");
  require(cfg.topk_group * per_group >= cfg.top_k, fn, "top_k (", cfg.top_k, ") is more than the ", cfg.topk_group * per_group,
          " experts of topk_group (", cfg.topk_group, ") groups");
  require(cfg.routed_scaling_factor > 0.0f && std::isfinite(cfg.routed_scaling_factor), fn, "routed_scaling_factor (",
          cfg.routed_scaling_factor, ") must be positive");
}

namespace {

void validate_logits(const char* fn, const Tensor2& logits, const RouterConfig& cfg, const std::vector<float>& bias) {
  validate_router(fn, cfg);
  require_nonempty(fn, "logits", logits);
  require_dim(fn, "logits", logits, 1, "columns", cfg.num_experts, "num_experts");
  require_finite_logits(fn, logits);
  require(bias.empty() || bias.size() == cfg.num_experts, fn, "bias has ", bias.size(), " values, expected num_experts (",
          cfg.num_experts, ") or none");
  for (std::size_t e = 0; e < bias.size(); ++e) require(std::isfinite(bias[e]), fn, "bias[", e, "] is not finite");
}

}  // namespace

Tensor2 router_scores(const Tensor2& logits, const RouterConfig& cfg) {
  validate_logits("router_scores", logits, cfg, {});
  Tensor2 s = Tensor2::from_shape({logits.shape()[0], cfg.num_experts});
  for (std::size_t t = 0; t < logits.shape()[0]; ++t) {
    const std::vector<double> row = token_scores(logits, t, cfg);
    for (std::size_t e = 0; e < cfg.num_experts; ++e) s(t, e) = static_cast<float>(row[e]);
  }
  return s;
}

Routing route_top_k(const Tensor2& logits, const RouterConfig& cfg, const std::vector<float>& bias) {
  validate_logits("route_top_k", logits, cfg, bias);
  const std::size_t tokens = logits.shape()[0], num_experts = cfg.num_experts, k = cfg.top_k;
  const std::size_t per_group = num_experts / cfg.n_group;
  Routing r;
  r.tokens = tokens;
  r.num_experts = num_experts;
  for (std::size_t t = 0; t < tokens; ++t) {
    const std::vector<double> s = token_scores(logits, t, cfg);
    // the selection scores s_i + b_i (the bias chooses, it never weighs)
    std::vector<double> choice(s);
    for (std::size_t e = 0; e < bias.size(); ++e) choice[e] += bias[e];
    if (cfg.n_group > 1) {
      // a group's score: the sum of its two best selection scores; keep the topk_group best groups
      // (ties: the lower group) and rule out the experts of the others (Hugging Face fills them
      // with 0, which picks the same experts while the scores s + b stay positive)
      std::vector<double> group_score(cfg.n_group);
      for (std::size_t g = 0; g < cfg.n_group; ++g) {
        std::vector<double> members(choice.begin() + g * per_group, choice.begin() + (g + 1) * per_group);
        std::partial_sort(members.begin(), members.begin() + 2, members.end(), std::greater<>());
        group_score[g] = members[0] + members[1];
      }
      std::vector<std::size_t> groups(cfg.n_group);
      std::iota(groups.begin(), groups.end(), 0);
      std::stable_sort(groups.begin(), groups.end(), [&](std::size_t a, std::size_t b) { return group_score[a] > group_score[b]; });
      for (std::size_t rank = cfg.topk_group; rank < cfg.n_group; ++rank)
        for (std::size_t e = groups[rank] * per_group; e < (groups[rank] + 1) * per_group; ++e)
          choice[e] = -std::numeric_limits<double>::infinity();
    }
    // the k largest selection scores, ties to the lower index
    std::vector<std::size_t> order(num_experts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return choice[a] > choice[b]; });
    // g_i = s_i, renormalised over the k when norm_topk_prob, times the scaling factor
    double chosen_sum = 0.0;
    for (std::size_t j = 0; j < k; ++j) chosen_sum += s[order[j]];
    for (std::size_t j = 0; j < k; ++j) {
      double g = s[order[j]];
      if (cfg.norm_topk_prob) g /= chosen_sum;
      r.token.push_back(t);
      r.expert.push_back(order[j]);
      r.gate.push_back(static_cast<float>(g * cfg.routed_scaling_factor));
    }
  }
  return r;
}

}  // namespace tvlab::ref
