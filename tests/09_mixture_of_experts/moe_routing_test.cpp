// Chapter 09, capacity and the balanced routers of the reference: expert_capacity against
// ceil(tokens / E * cf) done in integers, dropped tokens passing the residual through the layer,
// expert choice's perfect balance, Sinkhorn's marginals and its routing, quantile thresholds'
// shares; and their errors.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "../common/testing.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/expert_choice.hpp"
#include "tvlab/ref/moe.hpp"
#include "tvlab/ref/moe_capacity.hpp"
#include "tvlab/ref/moe_router.hpp"
#include "tvlab/ref/quantile_router.hpp"
#include "tvlab/ref/sinkhorn_router.hpp"

namespace tvlab {
namespace {

using tvlab::testing::throws_error_naming;

// softmax of one row, in double
std::vector<double> softmax_row(const Tensor2& z, std::size_t t) {
  const std::size_t n = z.shape()[1];
  std::vector<double> p(n);
  double m = z(t, 0), sum = 0.0;
  for (std::size_t e = 1; e < n; ++e) m = std::max(m, double(z(t, e)));
  for (std::size_t e = 0; e < n; ++e) sum += p[e] = std::exp(double(z(t, e)) - m);
  for (double& v : p) v /= sum;
  return p;
}

// C = ceil(tokens * cf / E) with cf a ratio of integers num/den: ceil(tokens num / (E den)) exactly.
TEST(MoeCapacity, is_the_ceiling_of_tokens_over_experts_times_the_factor) {
  struct Case {
    std::size_t tokens, experts, num, den;
  };
  for (const Case c : {Case{4096, 8, 5, 4}, {4096, 8, 1, 1}, {4096, 8, 3, 2}, {4096, 64, 5, 4}, {4096, 64, 1, 2}, {100, 8, 1, 1},
                       {10, 1, 11, 10}, {100, 1, 11, 10}, {90, 3, 11, 10}, {50, 1, 11, 10}, {10, 3, 1, 1}, {7, 8, 5, 4}, {1, 8, 1, 1}, {1000, 7, 13, 10}, {8192, 16, 2, 1}}) {
    const std::size_t exact = (c.tokens * c.num + c.experts * c.den - 1) / (c.experts * c.den);
    EXPECT_EQ(ref::expert_capacity(c.tokens, c.experts, double(c.num) / double(c.den)), exact)
        << c.tokens << " tokens, " << c.experts << " experts, cf " << c.num << "/" << c.den;
  }
  EXPECT_EQ(ref::expert_capacity(4096, 8, 1.25), 640u) << "004 L153's example: 4096 tokens, 8 experts, cf 1.25";
  EXPECT_EQ(ref::expert_capacity(100, 1, 1.1), 110u) << "1.1 is stored above 1.1 (100 x 1.1 = 110.00000000000001 in double): 110, not 111";
  EXPECT_TRUE(throws_error_naming([] { ref::expert_capacity(10, 2, 0.0); }, {"expert_capacity", "capacity_factor (0)"}));
  EXPECT_TRUE(throws_error_naming([] { ref::expert_capacity(10, 2, -1.0); }, {"expert_capacity", "capacity_factor (-1)"}));
  EXPECT_TRUE(throws_error_naming([] { ref::expert_capacity(10, 2, std::numeric_limits<double>::infinity()); },
                                  {"expert_capacity", "capacity_factor"}));
  EXPECT_TRUE(throws_error_naming([] { ref::expert_capacity(10, 2, std::nan("")); }, {"expert_capacity", "capacity_factor"}));
  EXPECT_TRUE(throws_error_naming([] { ref::expert_capacity(0, 2, 1.0); }, {"expert_capacity", "tokens"}));
  EXPECT_TRUE(throws_error_naming([] { ref::expert_capacity(10, 0, 1.0); }, {"expert_capacity", "num_experts"}));
}

// A token whose every choice is dropped gets exactly 0 from the routed experts: the layer's output
// plus the residual is its input, unchanged. The other tokens keep the output of their kept choices.
TEST(MoeCapacity, a_fully_dropped_token_passes_the_residual_unchanged) {
  Rng rng(941);
  const std::size_t tokens = 12, d_model = 6, d_ff = 5, experts = 4;
  MoeWeights w;
  w.router = rng.normal_matrix(d_model, experts);
  for (std::size_t e = 0; e < experts; ++e)
    w.experts.push_back({rng.normal_matrix(d_model, d_ff), rng.normal_matrix(d_model, d_ff), rng.normal_matrix(d_ff, d_model)});
  const Tensor2 x = rng.normal_matrix(tokens, d_model);
  ref::RouterConfig cfg;
  cfg.num_experts = experts;
  cfg.top_k = 2;
  const Routing r = ref::route_top_k(ref::router_logits(x, w), cfg);
  const Routing kept = ref::apply_capacity(r, ref::expert_capacity(2 * tokens, experts, 0.5), ref::CapacityPriority::position);
  ASSERT_GT(ref::unrouted_tokens(kept), 0u) << "capacity 3 of 24 choices must leave some token with none";
  const Tensor2 y = ref::moe_experts(x, w, kept);
  std::vector<bool> routed(tokens, false);
  for (std::size_t t : kept.token) routed[t] = true;
  for (std::size_t t = 0; t < tokens; ++t) {
    if (routed[t]) continue;
    for (std::size_t c = 0; c < d_model; ++c) {
      EXPECT_EQ(y(t, c), 0.0f) << "token " << t << " has no expert left";
      EXPECT_EQ(x(t, c) + y(t, c), x(t, c)) << "the residual carries token " << t;
    }
  }
}

// Expert choice: every expert exactly C = ceil(n / E * c) tokens, its C best by S = softmax(z)
// (the C-th best at least every unchosen), gate S; tokens with no expert counted. n c / E an
// integer here, so C is the paper's n c / E.
TEST(ExpertChoice, every_expert_takes_exactly_its_capacity_of_best_tokens) {
  Rng rng(942);
  for (const double c : {0.5, 1.0, 2.0}) {
    const std::size_t n = 64, experts = 8;
    const Tensor2 z = rng.normal_matrix(n, experts, 0.0, 2.0);
    const Routing r = ref::route_expert_choice(z, c);
    const std::size_t capacity = std::size_t(double(n) * c / double(experts));
    for (std::size_t l : expert_load(r)) EXPECT_EQ(l, capacity) << "c " << c << ": perfect balance";
    EXPECT_EQ(r.size(), experts * capacity);
    EXPECT_EQ(r.dropped, 0u);
    std::vector<std::vector<double>> s(n);
    for (std::size_t t = 0; t < n; ++t) s[t] = softmax_row(z, t);
    std::vector<std::vector<bool>> chosen(n, std::vector<bool>(experts, false));
    for (std::size_t a = 0; a < r.size(); ++a) {
      chosen[r.token[a]][r.expert[a]] = true;
      EXPECT_NEAR(r.gate[a], s[r.token[a]][r.expert[a]], 1e-6) << "gate = S[t, e]";
      if (a > 0) {
        EXPECT_TRUE(r.token[a - 1] < r.token[a] || (r.token[a - 1] == r.token[a] && r.expert[a - 1] < r.expert[a]));
      }
    }
    std::size_t without = 0;
    for (std::size_t t = 0; t < n; ++t) without += std::none_of(chosen[t].begin(), chosen[t].end(), [](bool b) { return b; });
    EXPECT_EQ(ref::unrouted_tokens(r), without);
    if (c <= 1.0) {
      EXPECT_GT(without, 0u) << "c " << c << ": some token is chosen by no expert";
    }
    for (std::size_t e = 0; e < experts; ++e) {
      double worst_chosen = 2.0, best_unchosen = -1.0;
      for (std::size_t t = 0; t < n; ++t) {
        if (chosen[t][e]) worst_chosen = std::min(worst_chosen, s[t][e]);
        else best_unchosen = std::max(best_unchosen, s[t][e]);
      }
      EXPECT_GE(worst_chosen, best_unchosen) << "expert " << e << " took its best tokens";
    }
  }
}

// Ties go to the lower token: all-zero logits, each expert takes tokens 0..C-1.
TEST(ExpertChoice, ties_go_to_the_lower_token_and_bad_input_is_named) {
  Tensor2 z = Tensor2::from_shape({10, 4});
  std::fill(z.begin(), z.end(), 0.0f);
  const Routing r = ref::route_expert_choice(z, 1.0);  // C = ceil(10 / 4) = 3
  for (std::size_t a = 0; a < r.size(); ++a) EXPECT_LT(r.token[a], 3u);
  EXPECT_EQ(r.size(), 12u);
  EXPECT_EQ(ref::unrouted_tokens(r), 7u);
  EXPECT_TRUE(throws_error_naming([&] { ref::route_expert_choice(z, 0.0); }, {"route_expert_choice", "capacity_factor (0)"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::route_expert_choice(z, 5.0); }, {"route_expert_choice", "capacity_factor (5)", "13"}));
  z(3, 2) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { ref::route_expert_choice(z, 1.0); }, {"route_expert_choice", "token 3, expert 2"}));
}

// Sinkhorn: rows sum to r within the tolerance, columns to c (exact after the last column step, up
// to double rounding: 1e-9 relative), with default and given marginals; the plan is diag(u) K
// diag(v), so T[t, e] / exp(z[t, e]) factors as u_t v_e (checked through the cross ratio).
TEST(Sinkhorn, meets_its_marginals_within_the_tolerance) {
  Rng rng(943);
  const std::size_t n = 40, experts = 8;
  const Tensor2 z = rng.normal_matrix(n, experts, 0.0, 3.0);
  ref::SinkhornConfig cfg;
  cfg.tolerance = 1e-8;
  const ref::SinkhornPlan p = ref::sinkhorn_plan(z, cfg);
  EXPECT_TRUE(p.converged);
  EXPECT_GT(p.iterations, 1u) << "a skewed start needs more than one sweep";
  EXPECT_LE(p.row_error, 1e-8);
  std::vector<double> cols(experts, 0.0);
  for (std::size_t t = 0; t < n; ++t) {
    double row = 0.0;
    for (std::size_t e = 0; e < experts; ++e) row += p.plan(t, e), cols[e] += p.plan(t, e);
    EXPECT_NEAR(row, 1.0, 1e-8) << "row " << t;
  }
  for (std::size_t e = 0; e < experts; ++e) EXPECT_NEAR(cols[e], double(n) / double(experts), 1e-9 * n) << "column " << e;
  // diag(u) K diag(v): T00 T te / (T0e Tt0) = K00 Kte / (K0e Kt0)
  for (std::size_t t = 1; t < n; t += 7)
    for (std::size_t e = 1; e < experts; e += 3) {
      const double lhs = std::log(p.plan(0, 0)) + std::log(p.plan(t, e)) - std::log(p.plan(0, e)) - std::log(p.plan(t, 0));
      const double rhs = double(z(0, 0)) + z(t, e) - z(0, e) - z(t, 0);
      EXPECT_NEAR(lhs, rhs, 1e-9) << "(" << t << ", " << e << ")";
    }
  // given marginals: token weights 1..n, expert shares proportional to 1..E, same total
  ref::SinkhornConfig given;
  given.tolerance = 1e-7;
  double total = 0.0;
  for (std::size_t t = 0; t < n; ++t) given.row_marginals.push_back(double(t + 1)), total += double(t + 1);
  for (std::size_t e = 0; e < experts; ++e) given.col_marginals.push_back(total * double(e + 1) / double(experts * (experts + 1) / 2));
  const ref::SinkhornPlan q = ref::sinkhorn_plan(z, given);
  ASSERT_TRUE(q.converged);
  for (std::size_t t = 0; t < n; ++t) {
    double row = 0.0;
    for (std::size_t e = 0; e < experts; ++e) row += q.plan(t, e);
    EXPECT_NEAR(row, given.row_marginals[t], 1e-7) << "row " << t;
  }
  for (std::size_t e = 0; e < experts; ++e) {
    double col = 0.0;
    for (std::size_t t = 0; t < n; ++t) col += q.plan(t, e);
    EXPECT_NEAR(col, given.col_marginals[e], 1e-9 * total) << "column " << e;
  }
}

// A tighter tolerance takes more iterations; logits of +-1e4 stay finite (the log-domain form);
// an iteration cap below what is needed reports non-convergence, and the router refuses it.
TEST(Sinkhorn, reports_its_iterations_and_survives_huge_logits) {
  Rng rng(944);
  const Tensor2 z = rng.normal_matrix(30, 6, 0.0, 2.0);
  ref::SinkhornConfig loose, tight;
  loose.tolerance = 1e-3;
  tight.tolerance = 1e-10;
  const ref::SinkhornPlan a = ref::sinkhorn_plan(z, loose), b = ref::sinkhorn_plan(z, tight);
  EXPECT_TRUE(a.converged && b.converged);
  EXPECT_LT(a.iterations, b.iterations);
  Tensor2 huge = z;
  huge(0, 0) = 1e4f, huge(1, 3) = -1e4f, huge(2, 5) = 1e4f;
  const ref::SinkhornPlan h = ref::sinkhorn_plan(huge, loose);
  EXPECT_TRUE(h.converged);
  for (double v : h.plan) EXPECT_TRUE(std::isfinite(v));
  ref::SinkhornConfig capped = tight;
  capped.max_iterations = 1;
  const ref::SinkhornPlan c = ref::sinkhorn_plan(z, capped);
  EXPECT_FALSE(c.converged);
  EXPECT_EQ(c.iterations, 1u);
  EXPECT_TRUE(throws_error_naming([&] { ref::route_sinkhorn(z, 2, capped); }, {"route_sinkhorn", "max_iterations (1)"}));
}

// Routing by the plan: each token's top-k by T (checked here from the plan), gates the softmax over
// the chosen logits; on a skewed router the plan's top-1 loads are far more even than the logits'.
TEST(Sinkhorn, routes_by_the_plan_and_balances_a_skewed_router) {
  Rng rng(945);
  const std::size_t n = 256, experts = 8;
  Tensor2 z = rng.normal_matrix(n, experts);
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t e = 0; e < experts; ++e) z(t, e) -= float(std::log(double(e + 1)));  // Zipf-like preference
  ref::SinkhornConfig cfg;
  const ref::SinkhornPlan p = ref::sinkhorn_plan(z, cfg);
  const Routing r = ref::route_sinkhorn(z, 2, cfg);
  ASSERT_EQ(r.size(), 2 * n);
  for (std::size_t t = 0; t < n; ++t) {
    std::vector<std::size_t> order(experts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return p.plan(t, a) > p.plan(t, b); });
    const double za = z(t, order[0]), zb = z(t, order[1]), m = std::max(za, zb);
    const double denominator = std::exp(za - m) + std::exp(zb - m);
    EXPECT_EQ(r.expert[2 * t], order[0]);
    EXPECT_EQ(r.expert[2 * t + 1], order[1]);
    EXPECT_NEAR(r.gate[2 * t], std::exp(za - m) / denominator, 1e-6);
    EXPECT_NEAR(r.gate[2 * t + 1], std::exp(zb - m) / denominator, 1e-6);
  }
  ref::RouterConfig top1;
  top1.num_experts = experts;
  top1.top_k = 1;
  const std::vector<std::size_t> plain = expert_load(ref::route_top_k(z, top1)), balanced = expert_load(ref::route_sinkhorn(z, 1, cfg));
  const std::size_t plain_max = *std::max_element(plain.begin(), plain.end()), ot_max = *std::max_element(balanced.begin(), balanced.end());
  EXPECT_LT(ot_max, plain_max) << "Sinkhorn's top-1 evens the load";
  EXPECT_LE(double(ot_max), 1.5 * double(n) / double(experts)) << "within 50% of the mean (measured: see the lesson)";
}

TEST(Sinkhorn, bad_input_is_named) {
  Rng rng(946);
  const Tensor2 z = rng.normal_matrix(4, 3);
  ref::SinkhornConfig cfg;
  cfg.row_marginals = {1.0, 1.0, 0.0, 1.0};
  EXPECT_TRUE(throws_error_naming([&] { ref::sinkhorn_plan(z, cfg); }, {"sinkhorn_plan", "row_marginals[2] (0)"}));
  cfg.row_marginals = {1.0, 1.0, -1.0, 1.0};
  EXPECT_TRUE(throws_error_naming([&] { ref::sinkhorn_plan(z, cfg); }, {"sinkhorn_plan", "row_marginals[2] (-1)"}));
  cfg.row_marginals = {1.0, 1.0};
  EXPECT_TRUE(throws_error_naming([&] { ref::sinkhorn_plan(z, cfg); }, {"sinkhorn_plan", "row_marginals has 2"}));
  cfg = {};
  cfg.col_marginals = {1.0, 1.0, 1.0};
  EXPECT_TRUE(throws_error_naming([&] { ref::sinkhorn_plan(z, cfg); }, {"sinkhorn_plan", "totals differ", "4", "3"}));
  cfg.col_marginals = {2.0, 2.0};
  EXPECT_TRUE(throws_error_naming([&] { ref::sinkhorn_plan(z, cfg); }, {"sinkhorn_plan", "col_marginals has 2"}));
  cfg = {};
  cfg.tolerance = 0.0;
  EXPECT_TRUE(throws_error_naming([&] { ref::sinkhorn_plan(z, cfg); }, {"sinkhorn_plan", "tolerance (0)"}));
  cfg = {};
  cfg.max_iterations = 0;
  EXPECT_TRUE(throws_error_naming([&] { ref::sinkhorn_plan(z, cfg); }, {"sinkhorn_plan", "max_iterations"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::route_sinkhorn(z, 3); }, {"route_sinkhorn", "top_k (3)"}));
  Tensor2 nan = z;
  nan(1, 1) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { ref::sinkhorn_plan(nan); }, {"sinkhorn_plan", "token 1, expert 1"}));
}

// Quantile thresholds: on their own batch each expert gets exactly m = ceil(N / E * k) tokens (no
// ties in continuous random scores), the same assignments as expert choice with c = k; on a fresh
// batch from the same distribution the shares stay near m.
TEST(QuantileRouter, each_expert_gets_its_share) {
  Rng rng(947);
  const std::size_t n = 512, experts = 16, k = 2;
  Tensor2 z = rng.normal_matrix(n, experts);
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t e = 0; e < experts; ++e) z(t, e) -= float(std::log(double(e + 1)));
  const std::vector<double> tau = ref::quantile_thresholds(z, k);
  const Routing r = ref::route_quantile(z, tau);
  const std::size_t share = n * k / experts;  // 64
  for (std::size_t l : expert_load(r)) EXPECT_EQ(l, share);
  const Routing ec = ref::route_expert_choice(z, double(k));
  EXPECT_EQ(r.token, ec.token);
  EXPECT_EQ(r.expert, ec.expert);
  for (std::size_t a = 0; a < r.size(); ++a) EXPECT_NEAR(r.gate[a], softmax_row(z, r.token[a])[r.expert[a]], 1e-6);
  // the thresholds are column quantiles: exactly `share` scores of column e at or above tau_e
  for (std::size_t e = 0; e < experts; ++e) {
    std::size_t above = 0;
    for (std::size_t t = 0; t < n; ++t) above += softmax_row(z, t)[e] >= tau[e];
    EXPECT_EQ(above, share) << "expert " << e;
  }
  // a fresh batch: each share within 50% of m (binomial sd about sqrt(64) = 8, i.e. 12%)
  Tensor2 fresh = rng.normal_matrix(n, experts);
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t e = 0; e < experts; ++e) fresh(t, e) -= float(std::log(double(e + 1)));
  for (std::size_t l : expert_load(ref::route_quantile(fresh, tau))) {
    EXPECT_GT(l, share / 2);
    EXPECT_LT(l, share * 3 / 2);
  }
}

// Ties: all-zero logits give every score 1/E, every threshold 1/E, and every token every expert
// ("up to ties": the share is a lower bound then).
TEST(QuantileRouter, ties_at_the_threshold_and_bad_input_are_named) {
  Tensor2 z = Tensor2::from_shape({8, 4});
  std::fill(z.begin(), z.end(), 0.0f);
  const std::vector<double> tau = ref::quantile_thresholds(z, 1);
  for (double v : tau) EXPECT_DOUBLE_EQ(v, 0.25);
  EXPECT_EQ(ref::route_quantile(z, tau).size(), 32u);
  EXPECT_TRUE(throws_error_naming([&] { ref::quantile_thresholds(z, 4); }, {"quantile_thresholds", "top_k (4)"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::quantile_thresholds(z, 0); }, {"quantile_thresholds", "top_k (0)"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::route_quantile(z, {0.1, 0.2}); }, {"route_quantile", "thresholds has 2"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::route_quantile(z, {0.1, 0.2, std::nan(""), 0.1}); }, {"route_quantile", "thresholds[2]"}));
  z(5, 0) = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws_error_naming([&] { ref::route_quantile(z, tau); }, {"route_quantile", "token 5, expert 0"}));
}

}  // namespace
}  // namespace tvlab
