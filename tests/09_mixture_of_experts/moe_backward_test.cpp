// Chapter 09, the MoE layer's gradient (ref::moe_layer_backward) against central finite differences
// of L = sum(dy * moe_layer(x)) in every entry of x, of the router and of every expert's three
// matrices, for three routers: Mixtral's (softmax, renormalised), DeepSeek-V3's (sigmoid,
// renormalised, scaled, a temperature, a selection bias) and Switch's (softmax, k = 1, the
// probability as the gate). The cases are chosen so that no perturbation changes which experts are
// chosen (checked: the top-k is a step function, with no gradient).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../common/testing.hpp"
#include "random_layer.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/moe.hpp"
#include "tvlab/ref/moe_backward.hpp"

namespace tvlab::ref {
namespace {

using tvlab::testing::throws_error_naming;

struct Case {
  const char* name;
  RouterConfig cfg;
  std::vector<float> bias;
};

MoeWeights small_layer(Rng& rng, std::size_t d_model, std::size_t d_ff, std::size_t experts) {
  return moe::random_moe_layer(rng, d_model, d_ff, experts, 1, d_ff, 0.8, 0.5);
}

// L = sum dy * y in double
double loss(const Tensor2& x, const MoeWeights& w, const Case& c, const Tensor2& dy) {
  const Tensor2 y = moe_layer(x, w, c.cfg, c.bias);
  double l = 0.0;
  for (std::size_t i = 0; i < y.size(); ++i) l += double(dy.data()[i]) * y.data()[i];
  return l;
}

// The smallest gap, over tokens, between the k-th and (k+1)-th selection scores (s + b).
double selection_margin(const Tensor2& x, const MoeWeights& w, const Case& c) {
  const Tensor2 s = router_scores(router_logits(x, w), c.cfg);
  double margin = INFINITY;
  for (std::size_t t = 0; t < s.shape()[0]; ++t) {
    std::vector<double> v;
    for (std::size_t e = 0; e < c.cfg.num_experts; ++e) v.push_back(s(t, e) + (c.bias.empty() ? 0.0 : c.bias[e]));
    std::sort(v.rbegin(), v.rend());
    margin = std::min(margin, v[c.cfg.top_k - 1] - v[c.cfg.top_k]);
  }
  return margin;
}

// Every entry of `param` (a tensor inside x or w): (L(p + eps) - L(p - eps)) / 2 eps against the
// analytic gradient. The forward rounds y to float (relative 6e-8 of sum |dy y|, about 1e-6 here),
// divided by 2 eps = 2e-2: 1e-4 of noise; the truncation error is O(eps^2) = 1e-4 of the third
// derivative. Tolerance 2e-3 (1 + |g|).
void check_entries(const std::string& what, Tensor2& param, const Tensor2& grad, const std::function<double()>& l) {
  constexpr double eps = 1e-2;
  ASSERT_EQ(param.shape(), grad.shape()) << what;
  for (std::size_t i = 0; i < param.size(); ++i) {
    const float saved = param.data()[i];
    param.data()[i] = static_cast<float>(saved + eps);
    const double plus = l();
    param.data()[i] = static_cast<float>(saved - eps);
    const double minus = l();
    param.data()[i] = saved;
    const double fd = (plus - minus) / (2.0 * eps), g = grad.data()[i];
    ASSERT_NEAR(g, fd, 2e-3 * (1.0 + std::fabs(g))) << what << ", flat index " << i;
  }
}

TEST(Ch09Backward, the_gradient_matches_finite_differences) {
  RouterConfig mixtral;
  mixtral.num_experts = 4, mixtral.top_k = 2;
  RouterConfig deepseek = mixtral;
  deepseek.score = GateScore::sigmoid, deepseek.routed_scaling_factor = 2.5f, deepseek.temperature = 0.7f;
  RouterConfig switch_router = mixtral;
  switch_router.top_k = 1, switch_router.norm_topk_prob = false;
  const Case cases[] = {{"Mixtral", mixtral, {}}, {"DeepSeek-V3", deepseek, {0.05f, -0.02f, 0.0f, 0.03f}}, {"Switch", switch_router, {}}};
  for (const Case& c : cases) {
    Rng rng(920);
    MoeWeights w = small_layer(rng, 6, 8, 4);
    Tensor2 x = rng.normal_matrix(5, 6);
    const Tensor2 dy = rng.normal_matrix(5, 6);
    // a perturbation of 1e-2 moves a score by at most about 1e-2 * |W_g| |x| / tau: keep the top k well apart
    ASSERT_GT(selection_margin(x, w, c), 0.02) << c.name << ": the case is too close to a change of the chosen experts";
    const MoeGrads g = moe_layer_backward(x, w, c.cfg, c.bias, dy);
    const auto l = [&] { return loss(x, w, c, dy); };
    check_entries(std::string(c.name) + ": dx", x, g.x, l);
    check_entries(std::string(c.name) + ": d router", w.router, g.router, l);
    for (std::size_t e = 0; e < 4; ++e) {
      const std::string name = std::string(c.name) + ": d experts[" + std::to_string(e) + "]";
      check_entries(name + ".w1", w.experts[e].w1, g.experts[e].w1, l);
      check_entries(name + ".w2", w.experts[e].w2, g.experts[e].w2, l);
      check_entries(name + ".w3", w.experts[e].w3, g.experts[e].w3, l);
    }
    check_entries(std::string(c.name) + ": d shared[0].w1", w.shared[0].w1, g.shared[0].w1, l);
    check_entries(std::string(c.name) + ": d shared[0].w3", w.shared[0].w3, g.shared[0].w3, l);
  }
}

// An expert no token chooses gets zero gradients; with clipping, logits beyond c pass none.
TEST(Ch09Backward, unused_experts_and_clipped_logits_get_no_gradient) {
  Rng rng(921);
  MoeWeights w = small_layer(rng, 6, 8, 4);
  const Tensor2 x = rng.normal_matrix(5, 6), dy = rng.normal_matrix(5, 6);
  RouterConfig cfg;
  cfg.num_experts = 4, cfg.top_k = 1;
  std::vector<float> bias = {10.0f, 0.0f, 0.0f, 0.0f};  // everyone chooses expert 0
  const MoeGrads g = moe_layer_backward(x, w, cfg, bias, dy);
  for (std::size_t e = 1; e < 4; ++e)
    for (float v : g.experts[e].w1) ASSERT_EQ(v, 0.0f) << "expert " << e << " is never chosen";
  cfg.logit_clip = 1e-3f;  // every logit clipped: the router gets no gradient
  const MoeGrads clipped = moe_layer_backward(x, w, cfg, {}, dy);
  for (float v : clipped.router) ASSERT_EQ(v, 0.0f);
}

TEST(Ch09Backward, bad_input_is_named) {
  Rng rng(922);
  const MoeWeights w = small_layer(rng, 6, 8, 4);
  const Tensor2 x = rng.normal_matrix(5, 6);
  RouterConfig cfg;
  cfg.num_experts = 4, cfg.top_k = 2;
  EXPECT_TRUE(throws_error_naming([&] { moe_layer_backward(x, w, cfg, {}, rng.normal_matrix(4, 6)); },
                                  {"moe_layer_backward", "dy", "rows 4"}));
  Tensor2 dy = rng.normal_matrix(5, 6);
  dy(0, 0) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { moe_layer_backward(x, w, cfg, {}, dy); }, {"moe_layer_backward", "dy", "non-finite"}));
  cfg.num_experts = 5;
  EXPECT_TRUE(throws_error_naming([&] { moe_layer_backward(x, w, cfg, {}, rng.normal_matrix(5, 6)); },
                                  {"moe_layer_backward", "cfg.num_experts (5)"}));
}

}  // namespace
}  // namespace tvlab::ref
