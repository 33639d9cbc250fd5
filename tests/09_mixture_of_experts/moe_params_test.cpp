// Chapter 09, total and active parameters of MoE models: Mixtral 8x7B and DeepSeek-V3 recounted here
// matrix by matrix, the published totals (within the digits they are printed with), a config.json
// written by the test, the expert memory at a few formats, and bad input.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "../common/testing.hpp"
#include "tvlab/analysis/moe_params.hpp"

namespace tvlab::analysis {
namespace {

using tvlab::testing::throws_error_naming;

// Mixtral 8x7B (MixtralForCausalLM): per layer q_proj 4096x4096, k_proj and v_proj 4096x1024,
// o_proj 4096x4096, a router 4096x8, 8 experts of w1, w3 (4096x14336) and w2 (14336x4096), two
// RMSNorms; the embedding and lm_head 32000x4096; the final norm.
TEST(Ch09MoeParams, mixtral_8x7b_recounted_by_hand) {
  const double d = 4096, L = 32, V = 32000, F = 14336;
  const double attention = d * d + d * 1024 + d * 1024 + d * d;
  const double expert = d * F + d * F + F * d;
  const double per_layer_fixed = attention + d * 8 + 2 * d;
  const double total = L * (per_layer_fixed + 8 * expert) + 2 * V * d + d;
  const double active = L * (per_layer_fixed + 2 * expert) + 2 * V * d + d;
  const MoeShape& s = moe_shape("mixtral-8x7b");
  EXPECT_EQ(moe_total_parameters(s).total(), static_cast<long long>(total));
  EXPECT_EQ(moe_active_parameters(s).total(), static_cast<long long>(active));
  // Mistral's announcement: 46.7B total, 12.9B used per token (printed to 0.1B: within 0.05B).
  EXPECT_NEAR(total / 1e9, 46.7, 0.05);
  EXPECT_NEAR(active / 1e9, 12.9, 0.05);
  // The 46,702,792,704 that transformers counts for this config.
  EXPECT_EQ(moe_total_parameters(s).total(), 46702792704LL);
  EXPECT_EQ(expert_parameters_per_layer(s), static_cast<long long>(expert));
  EXPECT_EQ(moe_layer_count(s), 32);
}

// DeepSeek-V3 (modeling_deepseek.py): MLA per layer q_a_proj 7168x1536, q_a_layernorm 1536,
// q_b_proj 1536 x 128*(128+64), kv_a_proj_with_mqa 7168 x (512+64), kv_a_layernorm 512,
// kv_b_proj 512 x 128*(128+128), o_proj 128*128 x 7168; layers 0-2 a dense MLP of 18432; layers
// 3-60 256 routed experts and 1 shared of 2048, a gate 256x7168 and its 256 correction biases.
TEST(Ch09MoeParams, deepseek_v3_recounted_by_hand) {
  const double d = 7168, V = 129280, h = 128;
  const double mla = d * 1536 + 1536 * h * 192 + d * 576 + 512 * h * 256 + h * 128 * d;
  const double norms = 61 * (2 * d + 1536 + 512) + d;
  const double expert = 3 * d * 2048, moe_layers = 61 - 3;
  const double fixed = 61 * mla + 3 * 3 * d * 18432 + moe_layers * (expert + 256 * d + 256) + norms + 2 * V * d;
  const double total = fixed + moe_layers * 256 * expert, active = fixed + moe_layers * 8 * expert;
  const MoeShape& s = moe_shape("deepseek-v3");
  EXPECT_EQ(moe_total_parameters(s).total(), static_cast<long long>(total));
  EXPECT_EQ(moe_active_parameters(s).total(), static_cast<long long>(active));
  EXPECT_EQ(moe_total_parameters(s).shared_experts, static_cast<long long>(moe_layers * expert));
  // The report's "671B total parameters" (to 1B: within 0.5B).
  EXPECT_NEAR(total / 1e9, 671, 0.5);
  // "37B activated": the count without the embedding table (a token reads one row of it) is 36.6B,
  // which rounds to 37; with the table, as Mistral counts, 37.55B. 37B printed to 1B: within 0.5B.
  EXPECT_NEAR((active - V * d) / 1e9, 37, 0.5);
  EXPECT_NEAR(moe_active_parameters(s).without_embedding() / 1e9, 37, 0.5);
  // The MTP module: M (2d x d), three norms, one MoE block with its 256 + 1 experts and gate.
  const double mtp = 2 * d * d + 3 * d + mla + 2 * d + 1536 + 512 + 257 * expert + 256 * d + 256;
  EXPECT_EQ(mtp_parameters(s), static_cast<long long>(mtp));
  // README_WEIGHTS.md: 685B on Hugging Face = 671B of the main model + 14B of MTP. The checkpoint's
  // MTP layer stores its own copy of the embedding and the head: 11.6B + 2 V d = 13.5B, and the
  // whole 684.5B. Both published numbers are rounded to 1B, so their difference (14B) can be off by
  // up to 1B; the FP8 checkpoint's block scales (one float per 128 x 128 block) add a few 10^7 more.
  EXPECT_NEAR(mtp / 1e9, 11.6, 0.05);
  EXPECT_NEAR((mtp + 2 * V * d) / 1e9, 14, 1.0);
  EXPECT_NEAR((total + mtp + 2 * V * d) / 1e9, 685, 1.0);
}

// The other published counts: totals and actives the model names and cards state. Each is printed
// to its last digit (57B, 14B: within 0.5B); Qwen's A14B/A22B/A3B are the active counts.
TEST(Ch09MoeParams, published_totals_within_their_printed_digits) {
  const auto billions = [](long long n) { return static_cast<double>(n) / 1e9; };
  // DeepSeek-V2 report: 236B total, 21B activated.
  EXPECT_NEAR(billions(moe_total_parameters(moe_shape("deepseek-v2")).total()), 236, 0.5);
  EXPECT_NEAR(billions(moe_active_parameters(moe_shape("deepseek-v2")).without_embedding()), 21, 0.5);
  // Mixtral 8x22B: 141B total, 39B active (Mistral's announcement).
  EXPECT_NEAR(billions(moe_total_parameters(moe_shape("mixtral-8x22b")).total()), 141, 0.5);
  EXPECT_NEAR(billions(moe_active_parameters(moe_shape("mixtral-8x22b")).total()), 39, 0.5);
  // Qwen2-57B-A14B: 57B total, 14B active (the model card).
  EXPECT_NEAR(billions(moe_total_parameters(moe_shape("qwen2-57b-a14b")).total()), 57, 0.5);
  EXPECT_NEAR(billions(moe_active_parameters(moe_shape("qwen2-57b-a14b")).total()), 14, 0.5);
  // Qwen3-235B-A22B: 235B total, 22B active; Qwen3-30B-A3B: 30.5B total, 3.3B active (model cards).
  EXPECT_NEAR(billions(moe_total_parameters(moe_shape("qwen3-235b-a22b")).total()), 235, 0.5);
  EXPECT_NEAR(billions(moe_active_parameters(moe_shape("qwen3-235b-a22b")).total()), 22, 0.5);
  EXPECT_NEAR(billions(moe_total_parameters(moe_shape("qwen3-30b-a3b")).total()), 30.5, 0.05);
  // 3.353B: the card's "3.3B" is this count cut to 0.1B (rounded it would read 3.4B), so the test
  // accepts [3.3, 3.4).
  const double qwen3_small_active = billions(moe_active_parameters(moe_shape("qwen3-30b-a3b")).total());
  EXPECT_GE(qwen3_small_active, 3.3);
  EXPECT_LT(qwen3_small_active, 3.4);
  // Llama 4: 17B active each; Maverick 400B total. The published totals include the vision encoder,
  // which is not counted here: Maverick's decoder alone is 400.7B, so the text part is checked to
  // the 0.5% that the (under a billion) encoder and the rounding of "400B" leave; Scout's 109B is not
  // checked (its decoder is 107.8B).
  EXPECT_NEAR(billions(moe_active_parameters(moe_shape("llama-4-scout")).total()), 17, 0.5);
  EXPECT_NEAR(billions(moe_active_parameters(moe_shape("llama-4-maverick")).total()), 17, 0.5);
  EXPECT_NEAR(billions(moe_total_parameters(moe_shape("llama-4-maverick")).total()), 400, 2.0);
  EXPECT_EQ(moe_layer_count(moe_shape("llama-4-maverick")), 24);
}

TEST(Ch09MoeParams, layer_schedule_of_dense_and_moe_layers) {
  const MoeShape& v3 = moe_shape("deepseek-v3");
  EXPECT_FALSE(is_moe_layer(v3, 2));
  EXPECT_TRUE(is_moe_layer(v3, 3));
  EXPECT_EQ(moe_layer_count(v3), 58);
  const MoeShape& maverick = moe_shape("llama-4-maverick");  // layers 1, 3, ..., 47
  EXPECT_FALSE(is_moe_layer(maverick, 0));
  EXPECT_TRUE(is_moe_layer(maverick, 1));
  EXPECT_TRUE(is_moe_layer(maverick, 47));
  EXPECT_TRUE(throws_error_naming([&] { is_moe_layer(v3, 61); }, {"is_moe_layer", "layer (61)"}));
}

// The experts' bytes: N b / 8; Q4_K is 144 bytes per 256 weights (4.5 bits), Q8_0 34 per 32 (8.5).
TEST(Ch09MoeParams, expert_memory_at_a_number_of_bits) {
  EXPECT_DOUBLE_EQ(format_bits("bf16"), 16);
  EXPECT_DOUBLE_EQ(format_bits("fp8"), 8);
  EXPECT_DOUBLE_EQ(format_bits("Q4_K"), 144 * 8.0 / 256);
  EXPECT_DOUBLE_EQ(format_bits("Q8_0"), 34 * 8.0 / 32);
  const MoeParameters p = moe_total_parameters(moe_shape("mixtral-8x7b"));
  const double experts = static_cast<double>(p.routed_experts + p.shared_experts);
  EXPECT_DOUBLE_EQ(parameter_bytes(p.routed_experts + p.shared_experts, 16), experts * 2);
  EXPECT_DOUBLE_EQ(parameter_bytes(p.routed_experts + p.shared_experts, format_bits("Q4_K")), experts * 4.5 / 8);
  EXPECT_TRUE(throws_error_naming([] { format_bits("q3"); }, {"format_bits", "q3", "Q4_K", "bf16"}));
  EXPECT_TRUE(throws_error_naming([] { parameter_bytes(10, 0); }, {"parameter_bytes", "bits_per_weight"}));
  EXPECT_TRUE(throws_error_naming([] { parameter_bytes(-1, 4); }, {"parameter_bytes", "parameters (-1)"}));
}

// Switch Transformer, eq. 3: capacity = tokens / experts x capacity factor, rounded up.
TEST(Ch09MoeParams, expert_capacity) {
  EXPECT_EQ(expert_capacity(4096, 8, 1.25), 640);  // 512 x 1.25
  EXPECT_EQ(expert_capacity(4096, 8, 1.0), 512);
  EXPECT_EQ(expert_capacity(10, 3, 1.0), 4);  // 3.33 rounded up
  EXPECT_TRUE(throws_error_naming([] { expert_capacity(0, 8, 1.25); }, {"expert_capacity", "tokens"}));
  EXPECT_TRUE(throws_error_naming([] { expert_capacity(8, 0, 1.25); }, {"expert_capacity", "num_experts"}));
  EXPECT_TRUE(throws_error_naming([] { expert_capacity(8, 8, 0); }, {"expert_capacity", "capacity_factor"}));
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

// A small DeepSeek-style file: 4 layers, the first dense, MLA, 8 routed experts of 16 and 1 shared.
TEST(Ch09MoeParams, reads_a_small_config_json) {
  const std::string path = write_file("tiny_moe.json", R"({
    "model_type": "deepseek_v3", "hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 2,
    "num_key_value_heads": 2, "vocab_size": 100, "intermediate_size": 64, "moe_intermediate_size": 16,
    "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1,
    "q_lora_rank": 12, "kv_lora_rank": 8, "qk_nope_head_dim": 4, "qk_rope_head_dim": 2, "v_head_dim": 4,
    "tie_word_embeddings": false, "num_nextn_predict_layers": 1 })");
  const MoeShape s = read_moe_config(path);
  EXPECT_EQ(s.num_experts, 8);
  EXPECT_EQ(s.shared_intermediate_size, 16);
  EXPECT_TRUE(s.router_bias);
  // By hand: MLA 32*12 + 12*2*6 + 32*10 + 8*2*8 + 2*4*32 = 384 + 144 + 320 + 128 + 256 = 1232 a layer;
  // norms 2*32 + 12 + 8 = 84 a layer, + 32; dense FFN 3*32*64; 3 MoE layers of 8 + 1 experts of
  // 3*32*16 and a router 32*8 + 8; embedding and output 100*32 each.
  const long long expected = 4 * 1232 + 4 * 84 + 32 + 3 * 32 * 64 + 3 * (9 * 3 * 32 * 16 + 32 * 8 + 8) + 2 * 100 * 32;
  EXPECT_EQ(moe_total_parameters(s).total(), expected);
  // A Mixtral-style file: the experts' width is intermediate_size, head_dim d / h.
  const MoeShape m = read_moe_config(write_file("tiny_mixtral.json", R"({"model_type": "mixtral",
    "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 50, "intermediate_size": 24, "num_local_experts": 4, "num_experts_per_tok": 2})"));
  EXPECT_EQ(m.moe_intermediate_size, 24);
  EXPECT_EQ(m.head_dim, 4);
  EXPECT_EQ(moe_active_parameters(m).routed_experts, 2 * 2 * 3 * 16 * 24);
  // A Llama 4 file: the decoder in text_config, dense layers of intermediate_size_mlp, a shared expert.
  const MoeShape l4 = read_moe_config(write_file("tiny_llama4.json", R"({"text_config": {
    "model_type": "llama4_text", "hidden_size": 16, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 4, "vocab_size": 50, "intermediate_size": 8,
    "intermediate_size_mlp": 32, "num_local_experts": 4, "num_experts_per_tok": 1,
    "interleave_moe_layer_step": 2}})"));
  EXPECT_EQ(moe_layer_count(l4), 2);
  EXPECT_EQ(moe_total_parameters(l4).dense_ffn, 2 * 3 * 16 * 32);
  EXPECT_EQ(moe_total_parameters(l4).shared_experts, 2 * 3 * 16 * 8);
}

TEST(Ch09MoeParams, bad_configs_name_the_key) {
  EXPECT_TRUE(throws_error_naming([] { moe_shape("mixtral"); }, {"moe_shape", "mixtral", "mixtral-8x7b", "deepseek-v3"}));
  EXPECT_TRUE(throws_error_naming([] { read_moe_config("/no/such/config.json"); }, {"read_moe_config", "cannot open"}));
  EXPECT_TRUE(throws_error_naming([] { read_moe_config(write_file("bad.json", "{ not json")); }, {"not valid JSON"}));
  const std::string no_experts = write_file("no_experts.json", R"({"hidden_size": 16, "num_hidden_layers": 2,
    "num_attention_heads": 4, "vocab_size": 50, "intermediate_size": 24, "num_experts_per_tok": 2})");
  EXPECT_TRUE(throws_error_naming([&] { read_moe_config(no_experts); },
                                  {"num_local_experts or n_routed_experts or num_experts", "missing"}));
  const std::string no_hidden = write_file("no_hidden.json", R"({"num_hidden_layers": 2, "num_attention_heads": 4,
    "vocab_size": 50, "intermediate_size": 24, "num_local_experts": 4, "num_experts_per_tok": 2})");
  EXPECT_TRUE(throws_error_naming([&] { read_moe_config(no_hidden); }, {"hidden_size is missing"}));
  const std::string top_k = write_file("top_k.json", R"({"hidden_size": 16, "num_hidden_layers": 2,
    "num_attention_heads": 4, "vocab_size": 50, "intermediate_size": 24, "num_local_experts": 4, "num_experts_per_tok": 4})");
  EXPECT_TRUE(throws_error_naming([&] { read_moe_config(top_k); }, {"num_experts_per_tok (4)", "num_experts (4)"}));
  const std::string text = write_file("text.json", R"({"hidden_size": "16", "num_hidden_layers": 2})");
  EXPECT_TRUE(throws_error_naming([&] { read_moe_config(text); }, {"hidden_size must be a whole number"}));
  const std::string only = write_file("only.json", R"({"hidden_size": 16, "num_hidden_layers": 2,
    "num_attention_heads": 4, "vocab_size": 50, "moe_intermediate_size": 8, "num_experts": 4,
    "num_experts_per_tok": 2, "mlp_only_layers": [0]})");
  EXPECT_TRUE(throws_error_naming([&] { read_moe_config(only); }, {"mlp_only_layers"}));

  MoeShape s = moe_shape("mixtral-8x7b");
  s.hidden_size = 0;
  EXPECT_TRUE(throws_error_naming([&] { moe_total_parameters(s); }, {"moe_total_parameters", "hidden_size (0)"}));
  s = moe_shape("mixtral-8x7b");
  s.moe_intermediate_size = -5;
  EXPECT_TRUE(throws_error_naming([&] { moe_active_parameters(s); }, {"moe_intermediate_size (-5)"}));
  s = moe_shape("mixtral-8x7b");
  s.num_experts_per_tok = 9;
  EXPECT_TRUE(throws_error_naming([&] { moe_total_parameters(s); }, {"num_experts_per_tok (9)", "num_experts (8)"}));
  s = moe_shape("mixtral-8x7b");
  s.num_key_value_heads = 5;
  EXPECT_TRUE(throws_error_naming([&] { moe_total_parameters(s); }, {"num_attention_heads (32)", "num_key_value_heads (5)"}));
  s = moe_shape("deepseek-v3");
  s.intermediate_size = 0;  // layers 0-2 are dense and need a width
  EXPECT_TRUE(throws_error_naming([&] { moe_total_parameters(s); }, {"intermediate_size (0)", "3 layer(s) are dense"}));
  s = moe_shape("deepseek-v3");
  s.first_k_dense_replace = 61;
  EXPECT_TRUE(throws_error_naming([&] { moe_total_parameters(s); }, {"first_k_dense_replace (61)", "no MoE layer"}));
  s = moe_shape("deepseek-v3");
  s.qk_rope_head_dim = 0;
  EXPECT_TRUE(throws_error_naming([&] { moe_total_parameters(s); }, {"qk_rope_head_dim"}));
}

}  // namespace
}  // namespace tvlab::analysis
