#include "tvlab/analysis/moe_load.hpp"

#include <algorithm>
#include <cmath>

#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/expert_choice.hpp"
#include "tvlab/ref/moe_balance.hpp"
#include "tvlab/ref/moe_capacity.hpp"
#include "tvlab/ref/moe_router.hpp"
#include "tvlab/ref/quantile_router.hpp"
#include "tvlab/ref/sinkhorn_router.hpp"

namespace tvlab::analysis {
namespace {

constexpr std::size_t kDModel = 64;

// A random router W_g ~ N(0, 1/d) [d, E]: logits of N(0, 1) tokens are about N(0, 1).
Tensor2 random_router(Rng& rng, std::size_t num_experts) {
  return rng.normal_matrix(kDModel, num_experts, 0.0, 1.0 / std::sqrt(static_cast<double>(kDModel)));
}

// logits = x W_g (+ the Zipf-like preference -s ln(i + 1) when skewed), summed in double
Tensor2 logits_for(const Tensor2& x, const Tensor2& w, double zipf_exponent) {
  const std::size_t n = x.shape()[0], num_experts = w.shape()[1];
  Tensor2 z = Tensor2::from_shape({n, num_experts});
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t e = 0; e < num_experts; ++e) {
      double sum = -zipf_exponent * std::log(static_cast<double>(e + 1));
      for (std::size_t d = 0; d < kDModel; ++d) sum += static_cast<double>(x(t, d)) * w(d, e);
      z(t, e) = static_cast<float>(sum);
    }
  return z;
}

double max_over_mean(const std::vector<std::size_t>& load) {
  double total = 0.0, most = 0.0;
  for (std::size_t l : load) total += static_cast<double>(l), most = std::max(most, static_cast<double>(l));
  return most / (total / static_cast<double>(load.size()));
}

void check_router(const char* fn, std::size_t num_experts, std::size_t top_k) {
  require(num_experts >= 2, fn, "num_experts (", num_experts, ") must be at least 2");
  require(top_k >= 1 && top_k < num_experts, fn, "top_k (", top_k, ") must be in 1..num_experts-1 (", num_experts - 1, ")");
}

void check_zipf(const char* fn, double s) {
  require(std::isfinite(s) && s >= 0.0, fn, "zipf_exponent (", s, ") must be 0 or positive");
}

}  // namespace

std::vector<DropRateRow> drop_rate_table(std::size_t tokens, const std::vector<std::size_t>& num_experts,
                                         const std::vector<std::size_t>& top_ks, const std::vector<double>& capacity_factors,
                                         double zipf_exponent, std::uint64_t seed) {
  const char* fn = "drop_rate_table";
  require_positive(fn, "tokens", tokens);
  require(!num_experts.empty() && !top_ks.empty() && !capacity_factors.empty(), fn,
          "num_experts, top_ks and capacity_factors must each name at least one value");
  check_zipf(fn, zipf_exponent);
  for (std::size_t e : num_experts)
    for (std::size_t k : top_ks) check_router(fn, e, k);
  for (double cf : capacity_factors)
    require(std::isfinite(cf) && cf > 0.0, fn, "capacity_factor (", cf, ") must be positive and finite");
  std::vector<DropRateRow> rows;
  for (const bool skewed : {false, true}) {
    for (std::size_t e : num_experts) {
      // one batch and router per (data, E), shared by every k and cf
      Rng rng(seed + e);
      const Tensor2 x = rng.normal_matrix(tokens, kDModel);
      const Tensor2 w = random_router(rng, e);
      const Tensor2 z = logits_for(x, w, skewed ? zipf_exponent : 0.0);
      for (std::size_t k : top_ks) {
        ref::RouterConfig cfg;
        cfg.num_experts = e;
        cfg.top_k = k;
        const Routing r = ref::route_top_k(z, cfg);
        const double balance = max_over_mean(expert_load(r));
        for (double cf : capacity_factors) {
          // C = ceil(k N / E * cf): the buffer holds the k N assignments
          const std::size_t capacity = ref::expert_capacity(k * tokens, e, cf);
          const Routing kept = ref::apply_capacity(r, capacity, ref::CapacityPriority::position);
          rows.push_back({skewed ? "skewed" : "balanced", e, k, cf, capacity, balance,
                          static_cast<double>(kept.dropped) / static_cast<double>(k * tokens),
                          static_cast<double>(ref::unrouted_tokens(kept)) / static_cast<double>(tokens)});
        }
      }
    }
  }
  return rows;
}

BiasBalanceTable bias_balance_table(std::size_t batches, std::size_t tokens_per_batch, std::size_t num_experts,
                                    std::size_t top_k, const std::vector<double>& gammas,
                                    const std::vector<std::size_t>& report_steps, double zipf_exponent, std::uint64_t seed) {
  const char* fn = "bias_balance_table";
  require_positive(fn, "batches", batches);
  require_positive(fn, "tokens_per_batch", tokens_per_batch);
  check_router(fn, num_experts, top_k);
  check_zipf(fn, zipf_exponent);
  for (double g : gammas) require(std::isfinite(g) && g > 0.0, fn, "gamma (", g, ") must be positive and finite");
  ref::RouterConfig cfg;
  cfg.num_experts = num_experts;
  cfg.top_k = top_k;
  cfg.score = ref::GateScore::sigmoid;  // DeepSeek-V3's affinities
  Rng router_rng(seed);
  const Tensor2 w = random_router(router_rng, num_experts);
  BiasBalanceTable table;
  table.gammas = gammas;
  std::vector<std::vector<float>> bias(gammas.size(), std::vector<float>(num_experts, 0.0f));
  for (std::size_t step = 0; step < batches; ++step) {
    // batch `step`: the same tokens for the plain router and every gamma
    Rng rng(seed + 1 + step);
    const Tensor2 z = logits_for(rng.normal_matrix(tokens_per_batch, kDModel), w, zipf_exponent);
    const bool report = std::find(report_steps.begin(), report_steps.end(), step) != report_steps.end();
    BiasBalanceRow row;
    row.step = step;
    if (report) row.plain = max_over_mean(expert_load(ref::route_top_k(z, cfg)));
    for (std::size_t g = 0; g < gammas.size(); ++g) {
      // route with the bias so far, then b_i += gamma sign(mean - L_i)
      const std::vector<std::size_t> load = expert_load(ref::route_top_k(z, cfg, bias[g]));
      if (report) row.biased.push_back(max_over_mean(load));
      bias[g] = ref::update_bias(bias[g], load, static_cast<float>(gammas[g]));
    }
    if (report) table.rows.push_back(row);
  }
  table.final_bias = bias;
  return table;
}

std::vector<RouterBalanceRow> router_balance_table(std::size_t tokens, const std::vector<std::size_t>& num_experts,
                                                   double zipf_exponent, std::uint64_t seed) {
  const char* fn = "router_balance_table";
  require(tokens >= 2, fn, "tokens (", tokens, ") must be at least 2");
  require(!num_experts.empty(), fn, "num_experts must name at least one value");
  check_zipf(fn, zipf_exponent);
  for (std::size_t e : num_experts) check_router(fn, e, 1);
  std::vector<RouterBalanceRow> rows;
  for (const bool skewed : {false, true}) {
    const std::string data = skewed ? "skewed" : "balanced";
    for (std::size_t e : num_experts) {
      // this batch, and an earlier one from the same distribution for the quantile thresholds
      Rng rng(seed + e);
      const Tensor2 w = random_router(rng, e);
      const Tensor2 x = rng.normal_matrix(tokens, kDModel), earlier = rng.normal_matrix(tokens, kDModel);
      const double s = skewed ? zipf_exponent : 0.0;
      const Tensor2 z = logits_for(x, w, s);
      const auto row = [&](const std::string& router, const Routing& r, std::size_t iterations) {
        rows.push_back({data, e, router, max_over_mean(expert_load(r)),
                        static_cast<double>(ref::unrouted_tokens(r)) / static_cast<double>(tokens), iterations});
      };
      ref::RouterConfig top1;
      top1.num_experts = e;
      top1.top_k = 1;
      row("top-1", ref::route_top_k(z, top1), 0);
      ref::SinkhornConfig sinkhorn;
      row("sinkhorn top-1", ref::route_sinkhorn(z, 1, sinkhorn), ref::sinkhorn_plan(z, sinkhorn).iterations);
      row("expert choice c=1", ref::route_expert_choice(z, 1.0), 0);
      row("quantile k=1 (earlier batch)", ref::route_quantile(z, ref::quantile_thresholds(logits_for(earlier, w, s), 1)), 0);
    }
  }
  return rows;
}

UniformBalance uniform_logits_balance(std::size_t tokens, std::size_t num_experts, std::size_t top_k, double zipf_exponent,
                                      std::uint64_t seed) {
  const char* fn = "uniform_logits_balance";
  require_positive(fn, "tokens", tokens);
  check_router(fn, num_experts, top_k);
  check_zipf(fn, zipf_exponent);
  ref::RouterConfig cfg;
  cfg.num_experts = num_experts;
  cfg.top_k = top_k;
  UniformBalance out;
  out.num_experts = num_experts;
  out.top_k = top_k;
  // zero logits: every token's ties go to experts 0..k-1, yet P_i = 1/E makes L_aux = alpha
  Tensor2 zero = Tensor2::from_shape({tokens, num_experts});
  std::fill(zero.begin(), zero.end(), 0.0f);
  const Routing r0 = ref::route_top_k(zero, cfg);
  out.mean_prob = ref::mean_router_probability(zero);
  out.aux_k_normalised = ref::load_balancing_loss(zero, r0, top_k, 1.0, ref::AuxLossNorm::k_normalised);
  out.aux_mixtral = ref::load_balancing_loss(zero, r0, top_k, 1.0, ref::AuxLossNorm::mixtral);
  out.z_loss = ref::router_z_loss(zero);
  // a random router on N(0, 1) tokens, balanced and skewed, each with its own routing
  Rng rng(seed);
  const Tensor2 x = rng.normal_matrix(tokens, kDModel);
  const Tensor2 w = random_router(rng, num_experts);
  const Tensor2 balanced = logits_for(x, w, 0.0), skewed = logits_for(x, w, zipf_exponent);
  out.aux_balanced_router = ref::load_balancing_loss(balanced, ref::route_top_k(balanced, cfg), top_k, 1.0);
  out.aux_skewed_router = ref::load_balancing_loss(skewed, ref::route_top_k(skewed, cfg), top_k, 1.0);
  return out;
}

}  // namespace tvlab::analysis
