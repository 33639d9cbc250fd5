// Chapter 09's document numbers (inventory 09.C), each computed here from first principles (the
// config.json shapes written out, the papers' tables) and compared with what the documents print,
// to the step of their printed digits: "46.7B" is reproduced by anything within 0.05B of 46.7B.
// Where a document is wrong the test states the correct value and the gap.

#include <gtest/gtest.h>

#include <cmath>

#include "tvlab/analysis/moe_params.hpp"

namespace tvlab::analysis {
namespace {

// |computed - printed| <= half the printed step: the printed value is the computed one rounded.
::testing::AssertionResult rounds_to(double computed, double printed, double step) {
  if (std::fabs(computed - printed) <= 0.5 * step * (1 + 1e-9)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << computed << " does not round to " << printed << " (step " << step << ")";
}

// Mixtral 8x7B (Mixtral-8x7B-v0.1 config.json): d = 4096, L = 32, 32 heads of 128, 8 kv heads,
// experts of F = 14336, V = 32000, 8 experts, top-2.
constexpr double kD = 4096, kL = 32, kV = 32000, kF = 14336;
constexpr double kMixtralExpertLayer = 3 * kD * kF;
constexpr double kMixtralShared = kL * (2 * kD * kD + 2 * kD * 1024 + kD * 8 + 2 * kD) + 2 * kV * kD + kD;

TEST(Ch09Documents, mixtral_split_000_L299) {
  const double expert = kL * kMixtralExpertLayer;  // one expert's FFN in all 32 layers: 5.64B
  const double total = kMixtralShared + 8 * expert, active = kMixtralShared + 2 * expert;
  EXPECT_TRUE(rounds_to(total / 1e9, 46.7, 0.1));   // "模型总参数约 46.7B"
  EXPECT_TRUE(rounds_to(active / 1e9, 13, 1));      // "每个 token 实际激活约 13B"
  EXPECT_TRUE(rounds_to(active / 1e9, 12.9, 0.1));  // 004 L169: 12.9B
  EXPECT_TRUE(rounds_to(kMixtralShared / 1e9, 2, 1));  // "共享的（约 2B）": 1.61B
  // Erratum: "每个专家只有独立的 FFN 参数（约 5B）": an expert is 5.64B (5.6B), and 2 + 2 x 5 = 12,
  // not 13; "每个专家 7B" is the name 8x7B, not an expert's size.
  EXPECT_FALSE(rounds_to(expert / 1e9, 5, 1));
  EXPECT_NEAR(expert / 1e9, 5.637, 0.0005);
  EXPECT_FALSE(rounds_to(expert / 1e9, 7, 1));
  // Erratum: "推理成本接近 7B 模型": a token uses 12.9B, 1.78 times Mistral 7B's 7.24B (a 13B model's work).
  const double mistral_7b = kL * (2 * kD * kD + 2 * kD * 1024 + kMixtralExpertLayer + 2 * kD) + 2 * kV * kD + kD;
  EXPECT_FALSE(rounds_to(active / 1e9, 7, 1));
  EXPECT_NEAR(active / mistral_7b, 1.78, 0.005);
  // The library agrees with these sums.
  EXPECT_EQ(moe_total_parameters(moe_shape("mixtral-8x7b")).total(), static_cast<long long>(total));
  EXPECT_EQ(expert_parameters_across_layers(moe_shape("mixtral-8x7b")), static_cast<long long>(expert));
}

// DeepSeek-V3 (DeepSeek-V3 config.json): d = 7168, 61 layers of which the first 3 dense, 256 routed
// + 1 shared expert of 2048, top-8, MLA.
TEST(Ch09Documents, deepseek_v3_000_L301) {
  const double d = 7168, V = 129280, moe_layers = 61 - 3;
  const double expert_layer = 3 * d * 2048;  // 44.04M
  const double expert = moe_layers * expert_layer;
  // "每个专家约 2.55B 参数": one expert across the 58 MoE layers (per layer it is 44M).
  EXPECT_TRUE(rounds_to(expert / 1e9, 2.55, 0.01));
  EXPECT_NEAR(expert_layer / 1e6, 44.04, 0.005);
  // 257 experts of 2.55B make 656.5B of the 671B; the rest is attention (11.4B), the dense layers
  // (1.19B), embeddings (1.85B), routers and norms.
  EXPECT_NEAR(257 * expert / 1e9, 656.5, 0.05);
  const MoeParameters total = moe_total_parameters(moe_shape("deepseek-v3"));
  const MoeParameters active = moe_active_parameters(moe_shape("deepseek-v3"));
  EXPECT_TRUE(rounds_to(static_cast<double>(total.total()) / 1e9, 671, 1));
  // "共激活约 37B": 9 experts (8 + 1) of 44M in 58 layers, plus everything not an expert; without the
  // embedding table 36.6B, with it 37.55B (which would round to 38).
  const double not_experts = static_cast<double>(total.total()) - 257 * expert;
  const double used = not_experts + 9 * expert;
  EXPECT_EQ(static_cast<long long>(used), active.total());
  EXPECT_TRUE(rounds_to((used - V * d) / 1e9, 37, 1));
  EXPECT_FALSE(rounds_to(used / 1e9, 37, 1));
}

// 004 L179: "671B 参数即使用 INT4 量化也需约 335 GB": 671.03e9 x 4 / 8 = 335.5 GB, which rounds to
// 336 (the codes alone); ggml's Q4_K stores 144 bytes per 256 weights (4.5 bits): 377.5 GB.
TEST(Ch09Documents, deepseek_v3_at_int4_004_L179) {
  const double weights = static_cast<double>(moe_total_parameters(moe_shape("deepseek-v3")).total());
  EXPECT_NEAR(weights * 4 / 8 / 1e9, 335.51, 0.005);
  EXPECT_FALSE(rounds_to(weights * 4 / 8 / 1e9, 335, 1));
  EXPECT_TRUE(rounds_to(671e9 * 4 / 8 / 1e9, 335.5, 0.1));  // the 335 is 671B / 2, cut
  EXPECT_NEAR(weights * (144 * 8.0 / 256) / 8 / 1e9, 377.45, 0.05);
}

// 004 L153: capacity = ceil(tokens / E x factor); 1.25 leaves "25% 缓冲" over the even share.
TEST(Ch09Documents, capacity_004_L153) {
  const double even = 4096.0 / 8, capacity = std::ceil(even * 1.25);
  EXPECT_EQ(capacity, 640);
  EXPECT_TRUE(rounds_to((capacity / even - 1) * 100, 25, 1));
  EXPECT_EQ(expert_capacity(4096, 8, 1.25), 640);
}

// 004 L179: "E ⋅ K 个词元是每个 MoE 层有效训练的最小批大小": with T = E K tokens, expert i expects
// T K / E = K^2 tokens (DeepSeek-V3: 2048 tokens, 64 each; Mixtral: 16 tokens, 4 each).
TEST(Ch09Documents, minimum_batch_004_L179) {
  for (const char* name : {"deepseek-v3", "mixtral-8x7b"}) {
    const MoeShape& s = moe_shape(name);
    const double T = static_cast<double>(s.num_experts * s.num_experts_per_tok);
    const double k = static_cast<double>(s.num_experts_per_tok);
    EXPECT_DOUBLE_EQ(T * k / static_cast<double>(s.num_experts), k * k) << name;
  }
}

// 004 L175: DeepSeek-V2's "160 个专家 ... d_ff = 1536（而非传统的 8192）": the config has 160 routed
// experts of 1536; its one dense layer is 12288 wide, not 8192 (erratum).
TEST(Ch09Documents, deepseek_v2_experts_004_L175) {
  const MoeShape& v2 = moe_shape("deepseek-v2");
  EXPECT_EQ(v2.num_experts, 160);
  EXPECT_EQ(v2.moe_intermediate_size, 1536);
  EXPECT_EQ(v2.intermediate_size, 12288);
  EXPECT_FALSE(rounds_to(static_cast<double>(v2.intermediate_size), 8192, 1));
  // 12288 = 8 experts' width: the dense layer and 8 experts hold the same weights.
  EXPECT_EQ(v2.intermediate_size, 8 * v2.moe_intermediate_size);
}

// 000 L297 "从 7B 到 1.6T" against 004 L167 "从 8B 到 1.6T". Switch Transformer (Fedus et al. 2021),
// Table 9: Switch-Base is T5-Base (223M; d_model 768, d_ff 3072, 12 encoder + 12 decoder layers) with
// 128 experts in every other FFN (12 of the 24); Switch-C has 2048 experts (d_model 2080, d_ff 6144) in
// every FFN of its 15 + 15 layers. A T5 FFN is two matrices (ReLU, no gate).
TEST(Ch09Documents, switch_sizes_000_L297_004_L167) {
  const double base_ffn = 2 * 768 * 3072.0;
  const double switch_base = 223e6 + 12 * (128 - 1) * base_ffn;  // each replaced FFN becomes 128
  EXPECT_TRUE(rounds_to(switch_base / 1e9, 7, 1));   // 000: 7B (Table 9 prints 7B)
  EXPECT_FALSE(rounds_to(switch_base / 1e9, 8, 1));  // 004: 8B, an erratum
  const double switch_c = 30 * 2048 * 2 * 2080 * 6144.0;
  EXPECT_TRUE(rounds_to(switch_c / 1e12, 1.6, 0.1));  // 1.570T of experts (Table 9: 1571B in all)
}

// DeepSeek-V3 report, Table 1: 2664K (pre-training) + 119K (context extension) + 5K (post-training)
// = 2788K H800 hours, at $2 an hour $5.576M (004 L181 "约 $5.6M"); 004 L175 gives all 2.788M to the
// pre-training on 14.8T tokens (erratum: 2.664M).
TEST(Ch09Documents, deepseek_v3_training_cost_004_L175_L181) {
  const double hours = 2664e3 + 119e3 + 5e3;
  EXPECT_DOUBLE_EQ(hours, 2.788e6);
  EXPECT_TRUE(rounds_to(hours * 2 / 1e6, 5.6, 0.1));
  EXPECT_FALSE(rounds_to(2664e3 / 1e6, 2.788, 0.001));
  // "仅为同规模稠密模型的约 1/4": by 6 N D the training FLOPs scale with the parameters a token
  // uses, 36.6B of 671B: 1/18, not 1/4 (erratum).
  const MoeParameters total = moe_total_parameters(moe_shape("deepseek-v3"));
  const MoeParameters active = moe_active_parameters(moe_shape("deepseek-v3"));
  const double ratio = static_cast<double>(active.without_embedding()) / static_cast<double>(total.total());
  EXPECT_NEAR(1 / ratio, 18.3, 0.05);
  EXPECT_FALSE(rounds_to(ratio, 0.25, 0.05));
}

// 004 L169 (Table 8-5): Qwen MoE 57B / 14B with "8 共享 + 64 路由"; Qwen3-MoE "约200B"; Llama 4
// "约400B". "约200B" and "约400B" are read to two significant digits (step 10B): a writer meaning
// 235B would not write 200B.
TEST(Ch09Documents, table_8_5_004_L169) {
  const MoeShape& q = moe_shape("qwen2-57b-a14b");
  EXPECT_TRUE(rounds_to(static_cast<double>(moe_total_parameters(q).total()) / 1e9, 57, 1));
  EXPECT_TRUE(rounds_to(static_cast<double>(moe_active_parameters(q).total()) / 1e9, 14, 1));
  EXPECT_EQ(q.shared_intermediate_size / q.moe_intermediate_size, 8);
  EXPECT_EQ(q.num_experts, 64);
  const double qwen3 = static_cast<double>(moe_total_parameters(moe_shape("qwen3-235b-a22b")).total()) / 1e9;
  EXPECT_FALSE(rounds_to(qwen3, 200, 10));
  const double maverick = static_cast<double>(moe_total_parameters(moe_shape("llama-4-maverick")).total()) / 1e9;
  EXPECT_TRUE(rounds_to(maverick, 400, 10));
}

}  // namespace
}  // namespace tvlab::analysis
