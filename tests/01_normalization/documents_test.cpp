// Chapter 01: the documents' numbers on FFN width and cost, GELU/SiLU values, and the
// Post-LN / Pre-LN experiment. Expected values are derived here from first principles.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numbers>

#include "tvlab/analysis/attention_cost.hpp"
#include "tvlab/analysis/ffn_cost.hpp"
#include "tvlab/analysis/residual_stack.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/ref/activations.hpp"

namespace tvlab::analysis {
namespace {

TEST(Ch01Documents, swiglu_at_eight_thirds_keeps_the_parameters) {
  // 000: SwiGLU has three matrices (+50 % at equal d_ff); d_ff = 8/3 d restores the count.
  for (long long d : {512, 4096, 12288}) {
    EXPECT_EQ(ffn_params(FfnKind::swiglu, d, 4 * d) / ffn_params(FfnKind::relu, d, 4 * d), 1.5);
    EXPECT_NEAR(3 * d * swiglu_equal_params_width(d), ffn_params(FfnKind::gelu, d, 4 * d), 1e-6 * d * d);
  }
  EXPECT_NEAR(swiglu_equal_params_width(3) / 3, 2.6667, 1e-4);  // 003's "about 2.67x"
}

TEST(Ch01Documents, llama_rounds_the_width_to_a_multiple_of_256) {
  // floor(2 * 4d / 3) rounded up to a multiple of 256.
  for (long long d : {4096, 5120, 6656, 8192}) {
    const long long expected = (2 * 4 * d / 3 + 255) / 256 * 256;
    EXPECT_EQ(llama_intermediate_size(d), expected);
    EXPECT_EQ(llama_intermediate_size(d) % 256, 0);
  }
  EXPECT_EQ(llama_intermediate_size(4096), 11008);  // the value in LLaMA-7B's config
  // +0.78 % parameters over a 4d ReLU FFN at d = 4096.
  EXPECT_NEAR(ffn_params(FfnKind::swiglu, 4096, 11008) / ffn_params(FfnKind::relu, 4096, 4 * 4096), 1.0078, 1e-4);
}

TEST(Ch01Documents, gpt3_ffn_numbers) {
  // 000: d_model 12288, d_ff 49152 = 4 d; 2 x 12288 x 49152 ~ 1.2B parameters per layer.
  const double per_layer = ffn_params(FfnKind::gelu, 12288, 49152);
  EXPECT_EQ(per_layer, 2.0 * 12288 * 49152);
  EXPECT_NEAR(per_layer / 1e9, 1.208, 0.001);
  EXPECT_EQ(ffn_params(FfnKind::gelu, 12288, 49152, true) - per_layer, 49152 + 12288);
  // Per token: 2 d d_ff MACs = 4 d d_ff FLOPs; for n = 2048 tokens the layer is 2.47e12 MACs
  // (the document's "2.5e12 FLOPs" are MACs — erratum).
  EXPECT_EQ(ffn_macs_per_token(FfnKind::gelu, 12288, 49152), 2.0 * 12288 * 49152);
  EXPECT_NEAR(2048 * ffn_macs_per_token(FfnKind::gelu, 12288, 49152) / 1e12, 2.474, 0.001);
  EXPECT_EQ(2048 * ffn_macs_per_token(FfnKind::gelu, 12288, 49152), layer_macs(2048, 12288, 49152).ffn);
}

TEST(Ch01Documents, gelu_and_silu_values) {
  // Phi(1) = (1 + erf(1/sqrt 2)) / 2 computed here; GELU(1) = Phi(1).
  const double phi1 = 0.5 * (1 + std::erf(1 / std::numbers::sqrt2));
  const Tensor2 x = {{1.0f, -1.0f, 2.0f}};
  const Tensor2 g = ref::gelu(x), s = ref::silu(x);
  EXPECT_NEAR(g(0, 0), phi1, 1e-7);
  EXPECT_NEAR(g(0, 1), -(1 - phi1), 1e-7);  // GELU(-x) = -x Phi(-x) = -x (1 - Phi(x))
  EXPECT_NEAR(s(0, 0), 1 / (1 + std::exp(-1.0)), 1e-7);
  EXPECT_NEAR(s(0, 2), 2 / (1 + std::exp(-2.0)), 1e-7);
}

TEST(Ch01Documents, silu_is_not_monotonic) {
  // 000: Swish dips below zero for negative inputs before returning to 0: its minimum solves
  // d/dx [x sigma(x)] = sigma(x) (1 + x (1 - sigma(x))) = 0. Newton on that equation:
  double x = -1.0;
  for (int i = 0; i < 50; ++i) {
    const double s = 1 / (1 + std::exp(-x));
    const double f = 1 + x * (1 - s);
    const double df = (1 - s) - x * s * (1 - s);
    x -= f / df;
  }
  const double minimum = x / (1 + std::exp(-x));
  EXPECT_NEAR(x, -1.2785, 1e-4);
  EXPECT_NEAR(minimum, -0.2785, 1e-4);
  const Tensor2 probe = {{static_cast<float>(x), -3.0f, 0.0f}};
  const Tensor2 y = ref::silu(probe);
  EXPECT_LT(y(0, 0), y(0, 1));  // lower at the minimum than further left
  EXPECT_LT(y(0, 0), 0.0f);
}

TEST(Ch01Documents, post_ln_keeps_activations_at_unit_scale_pre_ln_lets_them_grow) {
  const int layers = 12;
  const auto post = residual_stack(NormPlacement::post_ln, layers, 32, 8, 5);
  const auto pre = residual_stack(NormPlacement::pre_ln, layers, 32, 8, 5);
  // Post-LN: every layer's input (after the first) is a LayerNorm output: RMS 1 (up to eps).
  for (int l = 1; l <= layers; ++l) EXPECT_NEAR(post.activation_rms[static_cast<std::size_t>(l)], 1.0, 1e-3);
  // Pre-LN: the residual stream adds a branch of RMS ~1 per layer, so its RMS grows with depth.
  EXPECT_GT(pre.activation_rms[layers], 2.0 * pre.activation_rms[0]);
  for (int l = 1; l <= layers; ++l)
    EXPECT_GT(pre.activation_rms[static_cast<std::size_t>(l)], pre.activation_rms[static_cast<std::size_t>(l - 1)]);
}

TEST(Ch01Documents, pre_ln_gradient_grows_toward_the_input_post_ln_gradient_stays_level) {
  const int layers = 24;
  for (std::uint64_t seed : {5, 6, 7}) {
    const auto post = residual_stack(NormPlacement::post_ln, layers, 32, 8, seed);
    const auto pre = residual_stack(NormPlacement::pre_ln, layers, 32, 8, seed);
    // Pre-LN: dx_l = dx_{l+1} + LN'(F'(dx_{l+1})): an identity path plus one branch per layer,
    // so the gradient at the input is several times the gradient at the output.
    EXPECT_GT(pre.gradient_rms.front() / pre.gradient_rms.back(), 2.0) << "seed " << seed;
    // Post-LN: each layer multiplies by (I + F') and divides by the RMS of x + F(x); with He
    // initialisation the two roughly cancel and the gradient keeps its order of magnitude.
    const double post_ratio = post.gradient_rms.front() / post.gradient_rms.back();
    EXPECT_GT(post_ratio, 0.5) << "seed " << seed;
    EXPECT_LT(post_ratio, 2.0) << "seed " << seed;
  }
}

TEST(Ch01Documents, calculators_reject_bad_sizes) {
  EXPECT_THROW(ffn_params(FfnKind::relu, 0, 4), tvlab::Error);
  EXPECT_THROW(llama_intermediate_size(4096, 0), tvlab::Error);
  EXPECT_THROW(residual_stack(NormPlacement::pre_ln, 0, 4, 4, 1), tvlab::Error);
}

}  // namespace
}  // namespace tvlab::analysis
