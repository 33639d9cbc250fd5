// Chapter 09, the MoE layer's gradient over every backend of the registry that has it, against
// the reference's (itself checked against finite differences in moe_backward_test.cpp): every
// gradient within float rounding of sums over tokens and hidden units, for Mixtral's and
// DeepSeek-V3's routers with a shared expert; and errors.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "random_layer.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/moe.hpp"

namespace tvlab::moe {
namespace {

using tvlab::testing::throws_error_naming;

MoeWeights grad_layer(Rng& rng, std::size_t d_model, std::size_t d_ff, std::size_t experts) {
  return random_moe_layer(rng, d_model, d_ff, experts, 1, d_ff, 0.5, 0.3);
}

// Float sums of up to tokens x d_ff products in any order against the reference's double ones:
// |g - ref| <= 1e-4 max|ref| + 1e-4 |ref| (the largest entries are sums of a few hundred terms).
void expect_close(const std::string& what, const Tensor2& got, const Tensor2& expected) {
  ASSERT_EQ(got.shape(), expected.shape()) << what;
  float scale = 0.0f;
  for (float v : expected) scale = std::max(scale, std::fabs(v));
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got.data()[i], expected.data()[i], 1e-4f * scale + 1e-4f * std::fabs(expected.data()[i]))
        << what << ", flat index " << i;
}

class Backward : public ::testing::TestWithParam<Backend> {};

TEST_P(Backward, gradients_match_the_reference) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  ref::RouterConfig mixtral;
  mixtral.num_experts = 8, mixtral.top_k = 2;
  ref::RouterConfig deepseek = mixtral;
  deepseek.score = ref::GateScore::sigmoid, deepseek.routed_scaling_factor = 2.5f, deepseek.n_group = 2, deepseek.top_k = 3;
  for (const ref::RouterConfig& cfg : {mixtral, deepseek}) {
    Rng rng(930 + cfg.top_k);
    const MoeWeights w = grad_layer(rng, 24, 40, 8);
    const Tensor2 x = rng.normal_matrix(45, 24), dy = rng.normal_matrix(45, 24);
    const ref::MoeGrads got = backend.moe_layer_backward(x, w, cfg, {}, dy);
    const ref::MoeGrads expected = ref::moe_layer_backward(x, w, cfg, {}, dy);
    const std::string router = cfg.score == ref::GateScore::sigmoid ? "DeepSeek-V3 router" : "Mixtral router";
    expect_close(backend.name + ", " + router + ": dx", got.x, expected.x);
    expect_close(backend.name + ", " + router + ": d router", got.router, expected.router);
    ASSERT_EQ(got.experts.size(), 8u);
    ASSERT_EQ(got.shared.size(), 1u);
    for (std::size_t e = 0; e < 8; ++e) {
      const std::string name = backend.name + ", " + router + ": d experts[" + std::to_string(e) + "]";
      expect_close(name + ".w1", got.experts[e].w1, expected.experts[e].w1);
      expect_close(name + ".w2", got.experts[e].w2, expected.experts[e].w2);
      expect_close(name + ".w3", got.experts[e].w3, expected.experts[e].w3);
    }
    expect_close(backend.name + ", " + router + ": d shared[0].w2", got.shared[0].w2, expected.shared[0].w2);
  }
}

TEST_P(Backward, bad_input_is_named) {
  const Backend& backend = GetParam();
  Rng rng(935);
  MoeWeights w = grad_layer(rng, 6, 8, 4);
  const Tensor2 x = rng.normal_matrix(5, 6);
  ref::RouterConfig cfg;
  cfg.num_experts = 4, cfg.top_k = 2;
  EXPECT_TRUE(throws_error_naming([&] { backend.moe_layer_backward(x, w, cfg, {}, rng.normal_matrix(5, 7)); },
                                  {"moe_layer_backward", "dy", "columns 7"}));
  Tensor2 dy = rng.normal_matrix(5, 6);
  dy(4, 5) = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws_error_naming([&] { backend.moe_layer_backward(x, w, cfg, {}, dy); }, {"moe_layer_backward", "dy", "non-finite"}));
  w.shared[0].w3(1, 1) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { backend.moe_layer_backward(x, w, cfg, {}, rng.normal_matrix(5, 6)); },
                                  {"moe_layer_backward", "shared[0].w3", "non-finite"}));
}

INSTANTIATE_TEST_SUITE_P(Ch09, Backward, ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::moe_layer_backward)),
                         tvlab::testing::ImplName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Backward);

}  // namespace
}  // namespace tvlab::moe
