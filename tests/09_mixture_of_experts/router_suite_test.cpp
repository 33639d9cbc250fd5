// Chapter 09, the token-choice router over every backend of the registry that has it (the
// reference and exercise 09.1): the chosen experts and gates against the definition computed here
// in double, the policies' properties (Mixtral's order of softmax and top-k, Switch's unnormalised
// gate, the selection bias that never weighs, expert groups, temperature and clipping), and errors.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::moe {
namespace {

using tvlab::testing::throws_error_naming;

class Router : public ::testing::TestWithParam<Backend> {};

ref::RouterConfig config(std::size_t experts, std::size_t k) {
  ref::RouterConfig cfg;
  cfg.num_experts = experts;
  cfg.top_k = k;
  return cfg;
}

// The k experts of largest value (ties: the lower index), computed independently of the router.
std::vector<std::size_t> top_indices(const std::vector<double>& v, std::size_t k) {
  std::vector<std::size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return v[a] > v[b]; });
  order.resize(k);
  return order;
}

// Mixtral: the k largest logits, gates = softmax over those k logits (the order Mixtral's code
// uses), in double; the router's softmax -> top-k -> renormalise must give the same.
TEST_P(Router, mixtral_gates_are_the_softmax_of_the_chosen_logits) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "09.1");
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  Rng rng(901);
  const Tensor2 logits = rng.normal_matrix(23, 8, 0.0, 2.0);
  const Routing r = backend.route_top_k(logits, config(8, 2), {});
  ASSERT_EQ(r.size(), 23u * 2u);
  EXPECT_EQ(r.tokens, 23u);
  EXPECT_EQ(r.num_experts, 8u);
  for (std::size_t t = 0; t < 23; ++t) {
    std::vector<double> z(8);
    for (std::size_t e = 0; e < 8; ++e) z[e] = logits(t, e);
    const std::vector<std::size_t> chosen = top_indices(z, 2);
    const double m = z[chosen[0]], denominator = std::exp(z[chosen[0]] - m) + std::exp(z[chosen[1]] - m);
    for (std::size_t j = 0; j < 2; ++j) {
      EXPECT_EQ(r.token[2 * t + j], t);
      EXPECT_EQ(r.expert[2 * t + j], chosen[j]) << "token " << t << ", choice " << j;
      EXPECT_NEAR(r.gate[2 * t + j], std::exp(z[chosen[j]] - m) / denominator, 1e-6) << "token " << t << ", choice " << j;
    }
  }
}

// Switch: k = 1 without renormalisation, the gate is the full softmax probability.
TEST_P(Router, switch_keeps_the_probability_as_the_gate) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "09.1");
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  Rng rng(902);
  const Tensor2 logits = rng.normal_matrix(9, 4);
  ref::RouterConfig cfg = config(4, 1);
  cfg.norm_topk_prob = false;
  const Routing r = backend.route_top_k(logits, cfg, {});
  for (std::size_t t = 0; t < 9; ++t) {
    std::vector<double> z(4);
    double sum = 0.0;
    for (std::size_t e = 0; e < 4; ++e) z[e] = logits(t, e);
    const double m = *std::max_element(z.begin(), z.end());
    for (double v : z) sum += std::exp(v - m);
    const std::size_t best = top_indices(z, 1)[0];
    EXPECT_EQ(r.expert[t], best);
    EXPECT_NEAR(r.gate[t], std::exp(z[best] - m) / sum, 1e-6) << "token " << t;
  }
}

// DeepSeek-V3: sigmoid scores; a bias on an expert makes it chosen, but its gate is still its
// score renormalised over the chosen (the bias never weighs), times the scaling factor.
TEST_P(Router, the_bias_chooses_but_never_weighs) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "09.1");
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  Rng rng(903);
  const Tensor2 logits = rng.normal_matrix(11, 8);
  ref::RouterConfig cfg = config(8, 2);
  cfg.score = ref::GateScore::sigmoid;
  cfg.routed_scaling_factor = 2.5f;
  std::vector<float> bias(8, 0.0f);
  bias[5] = 10.0f;  // larger than any score difference: expert 5 is always chosen
  const Routing with = backend.route_top_k(logits, cfg, bias), without = backend.route_top_k(logits, cfg, {});
  for (std::size_t t = 0; t < 11; ++t) {
    std::vector<double> s(8), choice(8);
    for (std::size_t e = 0; e < 8; ++e) s[e] = 1.0 / (1.0 + std::exp(-double(logits(t, e)))), choice[e] = s[e] + bias[e];
    const std::vector<std::size_t> chosen = top_indices(choice, 2);
    EXPECT_EQ(chosen[0], 5u);
    const double total = s[chosen[0]] + s[chosen[1]];
    for (std::size_t j = 0; j < 2; ++j) {
      EXPECT_EQ(with.expert[2 * t + j], chosen[j]) << "token " << t;
      EXPECT_NEAR(with.gate[2 * t + j], 2.5 * s[chosen[j]] / total, 1e-6) << "token " << t << ": the gate is s / sum s, not s + b";
    }
    // without the bias: the two largest scores
    const std::vector<std::size_t> plain = top_indices(s, 2);
    EXPECT_EQ(without.expert[2 * t], plain[0]);
    EXPECT_EQ(without.expert[2 * t + 1], plain[1]);
  }
}

// Expert groups (DeepSeek-V3): 16 experts in 4 groups, 2 groups per token: every chosen expert is
// in one of the two groups whose two best scores sum highest.
TEST_P(Router, group_limited_routing_stays_in_the_best_groups) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "09.1");
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  Rng rng(904);
  const Tensor2 logits = rng.normal_matrix(17, 16, 0.0, 2.0);
  ref::RouterConfig cfg = config(16, 4);
  cfg.score = ref::GateScore::sigmoid;
  cfg.n_group = 4;
  cfg.topk_group = 2;
  const Routing r = backend.route_top_k(logits, cfg, {});
  for (std::size_t t = 0; t < 17; ++t) {
    std::vector<double> s(16), group(4);
    for (std::size_t e = 0; e < 16; ++e) s[e] = 1.0 / (1.0 + std::exp(-double(logits(t, e))));
    for (std::size_t g = 0; g < 4; ++g) {
      std::vector<double> m(s.begin() + 4 * g, s.begin() + 4 * g + 4);
      std::sort(m.rbegin(), m.rend());
      group[g] = m[0] + m[1];
    }
    const std::vector<std::size_t> best_groups = top_indices(group, 2);
    std::vector<double> allowed(16, -INFINITY);
    for (std::size_t g : best_groups)
      for (std::size_t e = 4 * g; e < 4 * g + 4; ++e) allowed[e] = s[e];
    const std::vector<std::size_t> chosen = top_indices(allowed, 4);
    for (std::size_t j = 0; j < 4; ++j) EXPECT_EQ(r.expert[4 * t + j], chosen[j]) << "token " << t << ", choice " << j;
  }
}

// Temperature divides the logits, clipping clamps them: the same as routing the changed logits.
TEST_P(Router, temperature_and_clipping_act_on_the_logits) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "09.1");
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  Rng rng(905);
  const Tensor2 logits = rng.normal_matrix(7, 6, 0.0, 8.0);
  ref::RouterConfig cfg = config(6, 3);
  cfg.temperature = 2.0f;
  cfg.logit_clip = 5.0f;
  Tensor2 changed = logits;
  for (auto& v : changed) v = std::clamp(v, -5.0f, 5.0f) / 2.0f;
  const Routing a = backend.route_top_k(logits, cfg, {}), b = backend.route_top_k(changed, config(6, 3), {});
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a.expert[i], b.expert[i]);
    EXPECT_NEAR(a.gate[i], b.gate[i], 1e-6);
  }
  // a lower temperature sharpens: the first gate grows toward 1
  ref::RouterConfig cold = config(6, 3);
  cold.temperature = 0.1f;
  const Routing sharp = backend.route_top_k(logits, cold, {}), plain = backend.route_top_k(logits, config(6, 3), {});
  for (std::size_t t = 0; t < 7; ++t) EXPECT_GE(sharp.gate[3 * t], plain.gate[3 * t]) << "token " << t;
}

TEST_P(Router, bad_input_is_named) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "09.1");
  Rng rng(906);
  const Tensor2 logits = rng.normal_matrix(3, 4);
  EXPECT_TRUE(throws_error_naming([&] { backend.route_top_k(logits, config(4, 4), {}); }, {"route_top_k", "top_k (4)"}));
  EXPECT_TRUE(throws_error_naming([&] { backend.route_top_k(logits, config(4, 0), {}); }, {"route_top_k", "top_k (0)"}));
  EXPECT_TRUE(throws_error_naming([&] { backend.route_top_k(logits, config(5, 2), {}); }, {"route_top_k", "logits", "columns 4"}));
  Tensor2 nan = logits;
  nan(2, 1) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { backend.route_top_k(nan, config(4, 2), {}); }, {"route_top_k", "logit"}));
  ref::RouterConfig cfg = config(4, 2);
  cfg.temperature = 0.0f;
  EXPECT_TRUE(throws_error_naming([&] { backend.route_top_k(logits, cfg, {}); }, {"route_top_k", "temperature (0)"}));
  cfg = config(4, 2);
  cfg.n_group = 3;
  EXPECT_TRUE(throws_error_naming([&] { backend.route_top_k(logits, cfg, {}); }, {"route_top_k", "n_group (3)"}));
  EXPECT_TRUE(throws_error_naming([&] { backend.route_top_k(logits, config(4, 2), {1.0f}); }, {"route_top_k", "bias has 1"}));
}

INSTANTIATE_TEST_SUITE_P(Ch09, Router, ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::route_top_k)),
                         tvlab::testing::ImplName());

}  // namespace
}  // namespace tvlab::moe
