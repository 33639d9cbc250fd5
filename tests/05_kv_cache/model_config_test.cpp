// The built-in model configs (their internal consistency) and the reader of Hugging Face
// config.json files, on small files written into a temporary folder; every error names the file
// and the field.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "common/testing.hpp"
#include "tvlab/core/model_config.hpp"

namespace tvlab::kv {
namespace {

using tvlab::testing::throws_error_naming;

// Writes `text` as <temp>/tvlab_ch05_<name>.json and returns its path.
std::string write_config(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("tvlab_ch05_" + name + ".json");
  std::ofstream(path) << text;
  return path.string();
}

TEST(Ch05ModelConfig, built_in_configs_are_consistent_and_uniquely_named) {
  std::set<std::string> names;
  for (const ModelConfig& c : named_model_configs()) {
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate " << c.name;
    EXPECT_FALSE(c.source.empty()) << c.name << " cites no source";
    validate_model_config("test", c);
    EXPECT_EQ(c.num_attention_heads % c.num_key_value_heads, 0) << c.name;
    if (c.is_mla()) {
      // DeepSeek's d_h = qk_nope_head_dim = v_head_dim = 128, d_c = 4 d_h, d_h^R = d_h / 2.
      EXPECT_EQ(c.head_dim, c.qk_nope_head_dim) << c.name;
      EXPECT_EQ(c.kv_lora_rank, 4 * c.head_dim) << c.name;
      EXPECT_EQ(c.qk_rope_head_dim, c.head_dim / 2) << c.name;
    } else {
      // The dense models here all have d = h d_h.
      EXPECT_EQ(c.hidden_size, c.num_attention_heads * c.head_dim) << c.name;
    }
  }
  EXPECT_EQ(names.size(), 9u);
  EXPECT_EQ(named_model_config("llama-2-70b").group_size(), 8);
  EXPECT_EQ(named_model_config("llama-3.1-405b").group_size(), 16);
  EXPECT_EQ(named_model_config("llama-2-7b").group_size(), 1);
}

TEST(Ch05ModelConfig, reads_a_gqa_config_and_its_dtype) {
  const std::string path = write_config("gqa", R"({
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "torch_dtype": "bfloat16", "vocab_size": 128256})");
  const ModelConfig c = read_model_config(path);
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 4096 / 32);  // absent: hidden_size / heads
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_FALSE(c.is_mla());
}

TEST(Ch05ModelConfig, absent_kv_heads_mean_mha_and_an_explicit_head_dim_wins) {
  const ModelConfig mha = read_model_config(write_config("mha", R"({
    "hidden_size": 768, "num_attention_heads": 12, "num_hidden_layers": 12, "num_key_value_heads": null,
    "dtype": "float32"})"));
  EXPECT_EQ(mha.num_key_value_heads, 12);
  EXPECT_EQ(mha.head_dim, 64);
  EXPECT_EQ(mha.torch_dtype, "float32");  // transformers 5 writes "dtype"
  // Gemma-style: head_dim 256 with hidden 2048 and 8 heads (not 2048 / 8).
  const ModelConfig wide = read_model_config(write_config("head_dim", R"({
    "hidden_size": 2048, "num_attention_heads": 8, "num_hidden_layers": 18, "num_key_value_heads": 1,
    "head_dim": 256.0})"));
  EXPECT_EQ(wide.head_dim, 256);
  EXPECT_EQ(wide.num_key_value_heads, 1);
}

TEST(Ch05ModelConfig, reads_mla_configs_like_deepseek_v2_and_v2_lite) {
  // DeepSeek-V2's fields (no head_dim; hidden_size / heads = 5120 / 128 = 40 is not a head width).
  const ModelConfig c = read_model_config(write_config("mla", R"({
    "hidden_size": 5120, "num_attention_heads": 128, "num_hidden_layers": 60, "num_key_value_heads": 128,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
    "v_head_dim": 128, "torch_dtype": "bfloat16"})"));
  EXPECT_TRUE(c.is_mla());
  EXPECT_EQ(c.head_dim, 128);  // qk_nope_head_dim, the paper's d_h
  const ModelConfig& v2 = named_model_config("deepseek-v2");
  EXPECT_EQ(c.num_hidden_layers, v2.num_hidden_layers);
  EXPECT_EQ(c.kv_lora_rank, v2.kv_lora_rank);
  EXPECT_EQ(c.q_lora_rank, v2.q_lora_rank);
  EXPECT_EQ(c.qk_rope_head_dim, v2.qk_rope_head_dim);
  EXPECT_EQ(c.qk_nope_head_dim, v2.qk_nope_head_dim);
  EXPECT_EQ(c.v_head_dim, v2.v_head_dim);
  EXPECT_EQ(c.head_dim, v2.head_dim);
  // V2-Lite: queries not compressed, "q_lora_rank": null reads as 0.
  const ModelConfig lite = read_model_config(write_config("mla_lite", R"({
    "hidden_size": 2048, "num_attention_heads": 16, "num_hidden_layers": 27, "kv_lora_rank": 512,
    "q_lora_rank": null, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128})"));
  EXPECT_EQ(lite.q_lora_rank, 0);
  EXPECT_EQ(lite.num_key_value_heads, 16);
  EXPECT_EQ(lite.num_hidden_layers, named_model_config("deepseek-v2-lite").num_hidden_layers);
}

TEST(Ch05ModelConfig, bad_files_and_fields_name_the_file_and_the_field) {
  const std::string missing = (std::filesystem::temp_directory_path() / "tvlab_ch05_no_such_file.json").string();
  EXPECT_TRUE(throws_error_naming([&] { read_model_config(missing); }, {"read_model_config", missing, "cannot open"}));
  const std::string bad_json = write_config("bad_json", "{\"hidden_size\": 8,");
  EXPECT_TRUE(throws_error_naming([&] { read_model_config(bad_json); }, {bad_json, "not valid JSON"}));
  const std::string array = write_config("array", "[1, 2]");
  EXPECT_TRUE(throws_error_naming([&] { read_model_config(array); }, {array, "JSON object"}));
  const std::string no_layers = write_config("no_layers", R"({"hidden_size": 64, "num_attention_heads": 4})");
  EXPECT_TRUE(throws_error_naming([&] { read_model_config(no_layers); }, {no_layers, "num_hidden_layers", "missing"}));
  const std::string no_hidden = write_config("no_hidden", R"({"num_hidden_layers": 2, "num_attention_heads": 4})");
  EXPECT_TRUE(throws_error_naming([&] { read_model_config(no_hidden); }, {no_hidden, "hidden_size", "missing"}));
  const std::string no_heads = write_config("no_heads", R"({"num_hidden_layers": 2, "hidden_size": 64})");
  EXPECT_TRUE(throws_error_naming([&] { read_model_config(no_heads); }, {no_heads, "num_attention_heads", "missing"}));
  const std::string text_heads = write_config("text_heads", R"({"num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": "4"})");
  EXPECT_TRUE(throws_error_naming([&] { read_model_config(text_heads); }, {text_heads, "num_attention_heads", "whole number"}));
  const std::string half = write_config("half", R"({"num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 1.5})");
  EXPECT_TRUE(throws_error_naming([&] { read_model_config(half); }, {half, "num_key_value_heads", "whole number"}));
  // Sizes beyond a long long (a whole-number double, an unsigned integer) are refused, not converted.
  const std::string huge = write_config("huge", R"({"num_hidden_layers": 1e300, "hidden_size": 64,
    "num_attention_heads": 4})");
  EXPECT_TRUE(throws_error_naming([&] { read_model_config(huge); }, {huge, "num_hidden_layers", "64-bit"}));
  const std::string huge_unsigned = write_config("huge_unsigned", R"({"num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 18446744073709551615})");
  EXPECT_TRUE(throws_error_naming([&] { read_model_config(huge_unsigned); }, {huge_unsigned, "num_attention_heads", "64-bit"}));
  const std::string dtype = write_config("dtype", R"({"num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 4, "torch_dtype": 16})");
  EXPECT_TRUE(throws_error_naming([&] { read_model_config(dtype); }, {dtype, "torch_dtype", "string"}));
  const std::string indivisible = write_config("indivisible", R"({"num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 12, "num_key_value_heads": 5, "head_dim": 8})");
  EXPECT_TRUE(throws_error_naming([&] { read_model_config(indivisible); }, {indivisible, "num_attention_heads (12)", "num_key_value_heads (5)"}));
  const std::string uneven = write_config("uneven", R"({"num_hidden_layers": 2, "hidden_size": 100,
    "num_attention_heads": 3})");
  EXPECT_TRUE(throws_error_naming([&] { read_model_config(uneven); }, {uneven, "hidden_size (100)", "head_dim"}));
  const std::string zero_layers = write_config("zero_layers", R"({"num_hidden_layers": 0, "hidden_size": 64,
    "num_attention_heads": 4})");
  EXPECT_TRUE(throws_error_naming([&] { read_model_config(zero_layers); }, {zero_layers, "num_hidden_layers (0)"}));
  const std::string no_rope = write_config("no_rope", R"({"num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 4, "kv_lora_rank": 16, "qk_nope_head_dim": 16})");
  EXPECT_TRUE(throws_error_naming([&] { read_model_config(no_rope); }, {no_rope, "qk_rope_head_dim"}));
  EXPECT_TRUE(throws_error_naming([] { named_model_config("gpt-5"); }, {"named_model_config", "name", "gpt-5", "llama-2-70b"}));
}

TEST(Ch05ModelConfig, validation_names_each_field) {
  const ModelConfig good = named_model_config("deepseek-v2");
  auto with = [&](auto change) {
    ModelConfig c = good;
    change(c);
    return [c] { validate_model_config("check", c); };
  };
  EXPECT_TRUE(throws_error_naming(with([](ModelConfig& c) { c.hidden_size = 0; }), {"check", "hidden_size"}));
  EXPECT_TRUE(throws_error_naming(with([](ModelConfig& c) { c.num_attention_heads = -1; }), {"num_attention_heads"}));
  EXPECT_TRUE(throws_error_naming(with([](ModelConfig& c) { c.num_key_value_heads = 0; }), {"num_key_value_heads"}));
  EXPECT_TRUE(throws_error_naming(with([](ModelConfig& c) { c.head_dim = 0; }), {"head_dim"}));
  EXPECT_TRUE(throws_error_naming(with([](ModelConfig& c) { c.kv_lora_rank = -1; }), {"kv_lora_rank"}));
  EXPECT_TRUE(throws_error_naming(with([](ModelConfig& c) { c.q_lora_rank = -1; }), {"q_lora_rank"}));
  EXPECT_TRUE(throws_error_naming(with([](ModelConfig& c) { c.qk_nope_head_dim = -1; }), {"qk_nope_head_dim"}));
  EXPECT_TRUE(throws_error_naming(with([](ModelConfig& c) { c.v_head_dim = -1; }), {"v_head_dim"}));
  EXPECT_TRUE(throws_error_naming(with([](ModelConfig& c) { c.qk_rope_head_dim = -1; }), {"qk_rope_head_dim"}));
}

}  // namespace
}  // namespace tvlab::kv
