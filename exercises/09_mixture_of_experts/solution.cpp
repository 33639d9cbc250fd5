// Chapter 09's exercises: worked solutions. Each marked region is what a student writes;
// scripts/make_student.py turns this file into student.cpp with the regions replaced by
// NotImplemented stubs. Edit this file, then regenerate (`make student-stubs`).

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "tvlab/core/error.hpp"
#include "tvlab/student/moe.hpp"

namespace tvlab::student {

Routing route_top_k(const Tensor2& logits, const ref::RouterConfig& cfg, const std::vector<float>& bias) {
  // BEGIN EXERCISE 09.1 "top-k routing with renormalised gates" "Routing: the top k of E"
  ref::validate_router("route_top_k", cfg);
  require_nonempty("route_top_k", "logits", logits);
  require_dim("route_top_k", "logits", logits, 1, "columns", cfg.num_experts, "num_experts");
  require_finite("route_top_k", "logits", logits);
  require(bias.empty() || bias.size() == cfg.num_experts, "route_top_k", "bias has ", bias.size(),
          " values, expected num_experts or none");
  require_finite("route_top_k", "bias", bias);
  const std::size_t tokens = logits.shape()[0], num_experts = cfg.num_experts, per_group = num_experts / cfg.n_group;
  Routing r;
  r.tokens = tokens;
  r.num_experts = num_experts;
  for (std::size_t t = 0; t < tokens; ++t) {
    // scores: softmax (largest logit subtracted) or sigmoid of the clipped, tempered logits
    std::vector<double> s(num_experts);
    for (std::size_t e = 0; e < num_experts; ++e) {
      double z = logits(t, e);
      if (cfg.logit_clip > 0.0f) z = std::clamp(z, -double(cfg.logit_clip), double(cfg.logit_clip));
      s[e] = z / cfg.temperature;
    }
    if (cfg.score == ref::GateScore::sigmoid) {
      for (double& v : s) v = 1.0 / (1.0 + std::exp(-v));
    } else {
      const double m = *std::max_element(s.begin(), s.end());
      double sum = 0.0;
      for (double& v : s) sum += v = std::exp(v - m);
      for (double& v : s) v /= sum;
    }
    // selection: s + b, only the experts of the topk_group best groups (by their two best)
    std::vector<double> choice(s);
    for (std::size_t e = 0; e < bias.size(); ++e) choice[e] += bias[e];
    if (cfg.n_group > 1) {
      std::vector<std::pair<double, std::size_t>> groups;
      for (std::size_t g = 0; g < cfg.n_group; ++g) {
        std::vector<double> m(choice.begin() + g * per_group, choice.begin() + (g + 1) * per_group);
        std::sort(m.begin(), m.end(), std::greater<>());
        groups.push_back({-(m[0] + m[1]), g});  // ascending: best first, then the lower group
      }
      std::sort(groups.begin(), groups.end());
      for (std::size_t rank = cfg.topk_group; rank < cfg.n_group; ++rank)
        for (std::size_t e = 0; e < per_group; ++e) choice[groups[rank].second * per_group + e] = -INFINITY;
    }
    std::vector<std::size_t> order(num_experts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return choice[a] > choice[b]; });
    // gates: s of the chosen, renormalised over the k, scaled
    double total = 0.0;
    for (std::size_t j = 0; j < cfg.top_k; ++j) total += s[order[j]];
    for (std::size_t j = 0; j < cfg.top_k; ++j) {
      const double g = cfg.norm_topk_prob ? s[order[j]] / total : s[order[j]];
      r.token.push_back(t);
      r.expert.push_back(order[j]);
      r.gate.push_back(static_cast<float>(g * cfg.routed_scaling_factor));
    }
  }
  return r;
  // END EXERCISE
}

Routing apply_capacity(const Routing& r, std::size_t capacity, ref::CapacityPriority priority) {
  // BEGIN EXERCISE 09.2 "token dropping at an expert capacity (Switch and GShard priorities)" "Capacity and dropped tokens"
  validate_routing("apply_capacity", r, r.tokens, r.num_experts);
  require(capacity > 0, "apply_capacity", "capacity (", capacity, ") must be positive");
  // rank of each assignment among its token's assignments: 0 for the first choice
  std::vector<std::size_t> rank(r.size()), seen(r.tokens, 0);
  std::size_t ranks = 1;
  for (std::size_t a = 0; a < r.size(); ++a) {
    rank[a] = seen[r.token[a]]++;
    ranks = std::max(ranks, rank[a] + 1);
  }
  // Switch: one pass in list order; GShard: one pass per rank
  const bool by_rank = priority == ref::CapacityPriority::choice_rank;
  std::vector<bool> keep(r.size(), false);
  std::vector<std::size_t> used(r.num_experts, 0);
  for (std::size_t pass = 0; pass < (by_rank ? ranks : 1); ++pass)
    for (std::size_t a = 0; a < r.size(); ++a)
      if ((!by_rank || rank[a] == pass) && used[r.expert[a]] < capacity) {
        ++used[r.expert[a]];
        keep[a] = true;
      }
  Routing out;
  out.tokens = r.tokens;
  out.num_experts = r.num_experts;
  out.dropped = r.dropped;
  for (std::size_t a = 0; a < r.size(); ++a) {
    if (!keep[a]) {
      ++out.dropped;
    } else {
      out.token.push_back(r.token[a]);
      out.expert.push_back(r.expert[a]);
      out.gate.push_back(r.gate[a]);
    }
  }
  return out;
  // END EXERCISE
}

std::vector<float> update_bias(const std::vector<float>& bias, const std::vector<std::size_t>& load, float gamma) {
  // BEGIN EXERCISE 09.3 "one step of DeepSeek-V3's auxiliary-loss-free bias update" "Balancing without a loss"
  require(!bias.empty(), "update_bias", "bias must not be empty");
  require(load.size() == bias.size(), "update_bias", "load has ", load.size(), " values, bias ", bias.size());
  require(gamma > 0.0f && std::isfinite(gamma), "update_bias", "gamma (", gamma, ") must be positive and finite");
  require_finite("update_bias", "bias", bias);
  double mean = 0.0;
  for (std::size_t l : load) mean += static_cast<double>(l);
  mean /= static_cast<double>(load.size());
  std::vector<float> out(bias);
  for (std::size_t i = 0; i < bias.size(); ++i) {
    if (static_cast<double>(load[i]) < mean) out[i] += gamma;  // underloaded: chosen more often
    if (static_cast<double>(load[i]) > mean) out[i] -= gamma;  // overloaded: chosen less often
  }
  return out;
  // END EXERCISE
}

}  // namespace tvlab::student
