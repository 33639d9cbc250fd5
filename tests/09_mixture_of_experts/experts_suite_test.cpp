// Chapter 09, the experts' part of the MoE layer over every backend of the registry that has it:
// against the formula computed here in double (y_t = sum over t's assignments of g Expert(x_t),
// plus the shared experts), on routings with dropped choices, tokens with no expert and with many
// (expert choice), odd sizes; one expert with gate 1 is chapter 01's SwiGLU FFN; and errors.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "random_layer.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/ffn.hpp"
#include "tvlab/ref/moe.hpp"

namespace tvlab::moe {
namespace {

using tvlab::testing::throws_error_naming;

MoeWeights layer(Rng& rng, std::size_t d_model, std::size_t d_ff, std::size_t experts, std::size_t shared, std::size_t shared_d_ff) {
  return random_moe_layer(rng, d_model, d_ff, experts, shared, shared_d_ff, 1.0 / std::sqrt(double(d_model)), 0.5);
}

// One expert on one token, in double, straight from the formula (SiLU(x W1) * x W2) W3; also
// accumulates sum |h_f W3(f, c)| for the tolerance.
void expert_double(const SwigluWeights& w, const Tensor2& x, std::size_t t, std::vector<double>& out, std::vector<double>& magnitude,
                   double weight) {
  const std::size_t d_model = x.shape()[1], d_ff = w.w1.shape()[1];
  for (std::size_t f = 0; f < d_ff; ++f) {
    double a = 0.0, b = 0.0;
    for (std::size_t c = 0; c < d_model; ++c) a += double(x(t, c)) * w.w1(c, f), b += double(x(t, c)) * w.w2(c, f);
    const double h = a / (1.0 + std::exp(-a)) * b;
    for (std::size_t c = 0; c < d_model; ++c) {
      out[c] += weight * h * w.w3(f, c);
      magnitude[c] += std::fabs(weight * h * w.w3(f, c));
    }
  }
}

// |y - exact| <= 1e-5 + 8 sqrt(d_ff) u sum |terms| per element: float sums of d_ff products (and of
// d_model in the hidden layer, whose error the magnitude of the terms carries), in any order.
void expect_matches_formula(const Backend& backend, const Tensor2& x, const MoeWeights& w, const Routing& r, const std::string& label) {
  const Tensor2 y = backend.moe_experts(x, w, r);
  const std::size_t tokens = x.shape()[0], d_model = x.shape()[1], d_ff = w.experts[0].w1.shape()[1];
  ASSERT_EQ(y.shape()[0], tokens);
  ASSERT_EQ(y.shape()[1], d_model);
  for (std::size_t t = 0; t < tokens; ++t) {
    std::vector<double> exact(d_model, 0.0), magnitude(d_model, 0.0);
    for (std::size_t a = 0; a < r.size(); ++a)
      if (r.token[a] == t) expert_double(w.experts[r.expert[a]], x, t, exact, magnitude, r.gate[a]);
    for (const SwigluWeights& s : w.shared) expert_double(s, x, t, exact, magnitude, 1.0);
    for (std::size_t c = 0; c < d_model; ++c) {
      const double tol = 1e-5 + 8.0 * std::sqrt(double(d_ff + d_model)) * std::ldexp(1.0, -24) * magnitude[c] * 4.0;
      ASSERT_NEAR(y(t, c), exact[c], tol) << backend.name << ", " << label << ": token " << t << ", column " << c
                                          << " (a token gets the gate-weighted sum of its experts' outputs, plus the shared experts')";
    }
  }
}

class Experts : public ::testing::TestWithParam<Backend> {};

// Top-2 routing of 37 tokens to 8 experts, with a shared expert of another width.
TEST_P(Experts, top_k_routing_matches_the_formula) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  Rng rng(910);
  const MoeWeights w = layer(rng, 24, 40, 8, 1, 56);
  const Tensor2 x = rng.normal_matrix(37, 24);
  ref::RouterConfig cfg;
  cfg.num_experts = 8, cfg.top_k = 2;
  expect_matches_formula(backend, x, w, ref::route_top_k(ref::router_logits(x, w), cfg), "37 tokens, E = 8, k = 2, 1 shared");
}

// A hand-made routing: token 0 has no expert (dropped), token 1 has three, token 2 one with a
// negative gate, expert 3 gets no token, token 4 goes twice to expert 1 (expert choice can do that
// only once, but the layer's meaning is still the sum).
TEST_P(Experts, any_routing_is_the_sum_of_its_assignments) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  Rng rng(911);
  const MoeWeights w = layer(rng, 9, 13, 4, 0, 0);
  const Tensor2 x = rng.normal_matrix(5, 9);
  Routing r;
  r.tokens = 5, r.num_experts = 4;
  r.token = {1, 1, 1, 2, 4, 4, 3};
  r.expert = {0, 2, 1, 2, 1, 1, 0};
  r.gate = {0.5f, 0.25f, 0.25f, -1.5f, 0.3f, 0.7f, 1.0f};
  r.dropped = 1;
  expect_matches_formula(backend, x, w, r, "a hand-made routing");
  const Tensor2 y = backend.moe_experts(x, w, r);
  for (std::size_t c = 0; c < 9; ++c) EXPECT_EQ(y(0, c), 0.0f) << "token 0 has no expert: its output is 0";
}

// One expert, every token with gate 1: chapter 01's SwiGLU FFN.
TEST_P(Experts, one_expert_with_gate_one_is_the_swiglu_ffn) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  Rng rng(912);
  const MoeWeights w = layer(rng, 16, 32, 2, 0, 0);
  const Tensor2 x = rng.normal_matrix(6, 16);
  Routing r;
  r.tokens = 6, r.num_experts = 2;
  for (std::size_t t = 0; t < 6; ++t) r.token.push_back(t), r.expert.push_back(1), r.gate.push_back(1.0f);
  EXPECT_TRUE(tvlab::testing::matches(backend.moe_experts(x, w, r), DTensor2(xt::cast<double>(ref::ffn_swiglu(x, w.experts[1]))), {1e-5, 1e-5},
                                      {"moe_experts, one expert", {"token", "column"}, 912, "", ""}));
}

TEST_P(Experts, bad_input_is_named) {
  const Backend& backend = GetParam();
  Rng rng(913);
  MoeWeights w = layer(rng, 8, 12, 3, 0, 0);
  const Tensor2 x = rng.normal_matrix(4, 8);
  ref::RouterConfig cfg;
  cfg.num_experts = 3, cfg.top_k = 1;
  const Routing r = ref::route_top_k(ref::router_logits(x, w), cfg);
  MoeWeights bad_shape = w;
  bad_shape.experts[2].w3 = rng.normal_matrix(11, 8);
  EXPECT_TRUE(throws_error_naming([&] { backend.moe_experts(x, bad_shape, r); }, {"moe_experts", "experts[2].w3", "rows 11"}));
  MoeWeights other_width = w;
  other_width.experts[1] = {rng.normal_matrix(8, 10), rng.normal_matrix(8, 10), rng.normal_matrix(10, 8)};
  EXPECT_TRUE(throws_error_naming([&] { backend.moe_experts(x, other_width, r); }, {"moe_experts", "experts[1] has d_ff 10"}));
  // a NaN in an expert the routing uses (the optimized layer reads only those)
  MoeWeights nan_weight = w;
  const std::size_t used = r.expert[0];
  nan_weight.experts[used].w2(3, 4) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { backend.moe_experts(x, nan_weight, r); },
                                  {"moe_experts", "experts[" + std::to_string(used) + "].w2", "non-finite"}));
  Routing out_of_range = r;
  out_of_range.expert[2] = 3;
  EXPECT_TRUE(throws_error_naming([&] { backend.moe_experts(x, w, out_of_range); }, {"moe_experts", "routing.expert[2] = 3"}));
  EXPECT_TRUE(throws_error_naming([&] { backend.moe_experts(rng.normal_matrix(5, 8), w, r); },
                                  {"moe_experts", "for 4 tokens, x has 5"}));
  Tensor2 nan_x = x;
  nan_x(1, 1) = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws_error_naming([&] { backend.moe_experts(nan_x, w, r); }, {"moe_experts", "x", "non-finite"}));
}

INSTANTIATE_TEST_SUITE_P(Ch09, Experts, ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::moe_experts)),
                         tvlab::testing::ImplName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Experts);

}  // namespace
}  // namespace tvlab::moe

namespace tvlab::moe {
namespace {

class Layer : public ::testing::TestWithParam<Backend> {};

// The whole layer against the definition: logits x W_g and the router in double, then the experts'
// sum. The case is chosen so that no token's k-th and (k+1)-th logits are within 1e-3 of each other,
// so that float logits (an SGEMM) choose the same experts as double ones.
TEST_P(Layer, the_layer_is_the_router_then_the_experts) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  Rng rng(914);
  const MoeWeights w = layer(rng, 20, 28, 6, 1, 20);
  const Tensor2 x = rng.normal_matrix(29, 20);
  ref::RouterConfig cfg;
  cfg.num_experts = 6, cfg.top_k = 2;
  const Tensor2 logits = ref::router_logits(x, w);
  for (std::size_t t = 0; t < 29; ++t) {
    std::vector<float> z(logits.begin() + 6 * t, logits.begin() + 6 * t + 6);
    std::sort(z.rbegin(), z.rend());
    ASSERT_GT(z[1] - z[2], 1e-3) << "token " << t << ": pick another seed, the 2nd and 3rd logits nearly tie";
  }
  expect_matches_formula(backend, x, w, ref::route_top_k(logits, cfg), "the layer's own routing");
  const Tensor2 y = backend.moe_layer(x, w, cfg, {});
  const Tensor2 expected = ref::moe_experts(x, w, ref::route_top_k(logits, cfg));
  EXPECT_TRUE(tvlab::testing::matches(y, DTensor2(xt::cast<double>(expected)), {1e-5, 1e-5},
                                      {"moe_layer, 29 tokens, E = 6, k = 2", {"token", "column"}, 914, "", ""}));
}

TEST_P(Layer, bad_input_is_named) {
  const Backend& backend = GetParam();
  Rng rng(915);
  MoeWeights w = layer(rng, 8, 12, 3, 0, 0);
  const Tensor2 x = rng.normal_matrix(4, 8);
  ref::RouterConfig cfg;
  cfg.num_experts = 4, cfg.top_k = 1;
  EXPECT_TRUE(throws_error_naming([&] { backend.moe_layer(x, w, cfg, {}); }, {"moe_layer", "cfg.num_experts (4)", "(3)"}));
  cfg.num_experts = 3;
  w.router(2, 1) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { backend.moe_layer(x, w, cfg, {}); }, {"moe_layer", "w.router", "non-finite"}));
}

INSTANTIATE_TEST_SUITE_P(Ch09, Layer, ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::moe_layer)),
                         tvlab::testing::ImplName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Layer);

}  // namespace
}  // namespace tvlab::moe
