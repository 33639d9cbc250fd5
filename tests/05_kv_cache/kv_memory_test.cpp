// The KV-cache calculators against their closed forms, the identities between the attention kinds
// (MQA = GQA(g = 1), MHA = GQA(g = h), TPA and MLA against their definitions), tensor parallelism's
// split rule, and every error path. The sizes are products of small integers, exact in double, so
// the comparisons are exact unless stated.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/testing.hpp"
#include "tvlab/analysis/kv_memory.hpp"
#include "tvlab/core/model_config.hpp"

namespace tvlab::kv {
namespace {

using namespace tvlab::analysis;
using tvlab::testing::throws_error_naming;

TEST(Ch05KvMemory, bytes_per_element_follow_the_formats_bit_widths) {
  // bits / 8: fp32 32, fp16 and bf16 16, fp8 and int8 8, int4 4.
  EXPECT_EQ(bytes_per_element(DType::fp32), 32 / 8.0);
  EXPECT_EQ(bytes_per_element(DType::fp16), 16 / 8.0);
  EXPECT_EQ(bytes_per_element(DType::bf16), 16 / 8.0);
  EXPECT_EQ(bytes_per_element(DType::fp8), 8 / 8.0);
  EXPECT_EQ(bytes_per_element(DType::int8), 8 / 8.0);
  EXPECT_EQ(bytes_per_element(DType::int4), 4 / 8.0);
  EXPECT_EQ(dtype_from_torch_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(dtype_from_torch_dtype("float16"), DType::fp16);
  EXPECT_EQ(dtype_from_torch_dtype("float32"), DType::fp32);
  EXPECT_EQ(dtype_from_torch_dtype("float8_e4m3fn"), DType::fp8);
  EXPECT_EQ(dtype_from_torch_dtype("int8"), DType::int8);
  EXPECT_EQ(dtype_from_torch_dtype("int4"), DType::int4);
  // Every format's short name reads back as itself.
  for (DType d : {DType::fp32, DType::fp16, DType::bf16, DType::fp8, DType::int8, DType::int4})
    EXPECT_EQ(dtype_from_torch_dtype(dtype_name(d)), d) << dtype_name(d);
}

TEST(Ch05KvMemory, mqa_is_gqa_with_one_group_and_mha_is_gqa_with_h_groups) {
  const long long h = 32, d = 128;
  EXPECT_EQ(gqa_kv_elements_per_token(h, h, d), 2.0 * h * d);  // MHA: 2 h d_h
  EXPECT_EQ(gqa_kv_elements_per_token(h, 1, d), 2.0 * d);      // MQA: 2 d_h
  // GQA scales linearly in g: the cache ratio to MHA is g / h.
  for (long long g : {1, 2, 4, 8, 16, 32})
    EXPECT_EQ(gqa_kv_elements_per_token(h, g, d) / gqa_kv_elements_per_token(h, h, d),
              static_cast<double>(g) / static_cast<double>(h));
}

TEST(Ch05KvMemory, mla_caches_the_latent_and_one_shared_rope_key) {
  EXPECT_EQ(mla_kv_elements_per_token(512, 64), 512.0 + 64.0);
  EXPECT_EQ(mla_kv_elements_per_token(512, 0), 512.0);
  // DeepSeek-V2's paper (arXiv:2405.04434, Table 1): with d_c = 4 d_h and d_h^R = d_h / 2 the MLA
  // cache equals GQA with 2.25 groups: (4 + 1/2) d_h = 2 x 2.25 x d_h.
  const long long dh = 128;
  EXPECT_EQ(mla_kv_elements_per_token(4 * dh, dh / 2), 2.0 * 2.25 * dh);
}

TEST(Ch05KvMemory, tpa_caches_one_head_factor_and_one_token_factor_per_rank) {
  // Count the factors one by one: R_K key terms and R_V value terms, each a vector of h plus one of d_h.
  const long long rk = 2, rv = 3, h = 8, d = 16;
  double counted = 0;
  for (long long r = 0; r < rk + rv; ++r) counted += static_cast<double>(h) + static_cast<double>(d);
  EXPECT_EQ(tpa_kv_elements_per_token(rk, rv, h, d), counted);
}

TEST(Ch05KvMemory, sizes_multiply_out_layers_tokens_batch_and_bytes) {
  // 2 L g d_h S B b, computed as one product: Llama-3-8B-like, 3 sequences of 1000 tokens in bf16.
  const long long L = 32, h = 32, g = 8, d = 128, S = 1000, B = 3;
  const KvCacheSize s = kv_cache_size(gqa_kv_elements_per_token(h, g, d), L, S, B, DType::bf16);
  EXPECT_EQ(s.bytes_total, 2.0 * L * g * d * S * B * 2);
  EXPECT_EQ(s.bytes_per_sequence, 2.0 * L * g * d * S * 2);
  EXPECT_EQ(s.bytes_per_token, 2.0 * L * g * d * 2);
  EXPECT_EQ(s.bytes_per_layer, 2.0 * g * d * S * 2);
  EXPECT_EQ(s.bytes_per_token_per_layer, 2.0 * g * d * 2);
  // int4 is a quarter of bf16.
  EXPECT_EQ(kv_cache_size(2.0 * g * d, L, S, B, DType::int4).bytes_total * 4, s.bytes_total);
}

TEST(Ch05KvMemory, a_model_config_chooses_the_gqa_or_the_mla_formula) {
  const ModelConfig& llama = named_model_config("llama-3-8b");
  EXPECT_EQ(model_kv_elements_per_token(llama), 2.0 * 8 * 128);
  const ModelConfig& v3 = named_model_config("deepseek-v3");
  EXPECT_EQ(model_kv_elements_per_token(v3), 512.0 + 64.0);
  const KvCacheSize s = kv_cache_size(v3, 4096, 2, DType::fp8);
  EXPECT_EQ(s.bytes_total, (512.0 + 64.0) * 61 * 4096 * 2 * 1);
}

TEST(Ch05KvMemory, dynamic_gqa_sums_the_layers_and_equals_uniform_gqa_when_all_g_agree) {
  const long long h = 32, d = 64, S = 100, B = 2;
  const std::vector<long long> uniform(6, 4);
  EXPECT_EQ(per_layer_gqa_kv_bytes(uniform, h, d, S, B, DType::fp16),
            kv_cache_size(gqa_kv_elements_per_token(h, 4, d), 6, S, B, DType::fp16).bytes_total);
  // Shallow layers with more groups, deep layers with fewer (004 L67): the sum of the layers.
  const std::vector<long long> tapered = {16, 16, 8, 8, 2, 1};
  double expected = 0;
  for (long long g : tapered) expected += 2.0 * g * d * S * B * 2;
  EXPECT_EQ(per_layer_gqa_kv_bytes(tapered, h, d, S, B, DType::fp16), expected);
}

TEST(Ch05KvMemory, gpus_are_counted_by_rounding_up_and_sequences_by_rounding_down) {
  EXPECT_EQ(gpus_needed(80e9), 1);
  EXPECT_EQ(gpus_needed(80e9 + 1), 2);
  EXPECT_EQ(gpus_needed(100e9, 140e9), 3);  // 240 GB over 80 GB
  EXPECT_EQ(gpus_needed(1, 0, 24e9), 1);
  EXPECT_EQ(sequences_that_fit(10e9, 140e9, 2), 2);     // (160 - 140) / 10
  EXPECT_EQ(sequences_that_fit(10e9 + 1, 140e9, 2), 1);
  EXPECT_EQ(sequences_that_fit(1e9, 200e9, 2), 0);      // the weights alone do not fit
}

TEST(Ch05KvMemory, counts_beyond_long_long_are_refused_not_converted) {
  // Converting a double of 2^63 or more to long long is undefined behaviour, so the count is
  // checked first. The largest double below 2^63 (2^63 - 1024) still converts exactly.
  const double two_to_63 = 9223372036854775808.0;
  const double below = std::nextafter(two_to_63, 0.0);
  EXPECT_EQ(gpus_needed(below, 0, 1), static_cast<long long>(below));
  EXPECT_EQ(sequences_that_fit(1, 0, 1, below), static_cast<long long>(below));
  EXPECT_TRUE(throws_error_naming([&] { gpus_needed(two_to_63, 0, 1); }, {"gpus_needed", "kv_bytes", "2^63"}));
  // An absurd sequence length: 1e30 bytes of cache on 80 GB GPUs.
  EXPECT_TRUE(throws_error_naming([] { gpus_needed(1e30); }, {"gpus_needed", "kv_bytes"}));
  EXPECT_TRUE(throws_error_naming([&] { sequences_that_fit(1, 0, 1, two_to_63); },
                                  {"sequences_that_fit", "bytes_per_sequence", "2^63"}));
  EXPECT_TRUE(throws_error_naming([] { sequences_that_fit(1e-300, 0, 1); }, {"sequences_that_fit", "bytes_per_sequence"}));
}

TEST(Ch05KvMemory, per_token_sums_of_the_largest_sizes_do_not_overflow) {
  // (R_K + R_V)(h + d_h) with every size at long long's maximum: the sums are taken in double,
  // so the result is the product of two doubled maxima, not a wrapped integer.
  constexpr long long big = std::numeric_limits<long long>::max();
  const double two_big = 2.0 * static_cast<double>(big);
  EXPECT_EQ(tpa_kv_elements_per_token(big, big, big, big), two_big * two_big);
}

TEST(Ch05KvMemory, tensor_parallel_splits_kv_heads_or_replicates_them) {
  // g >= t: each of 8 GPUs owns 64 / 8 = 8 heads of an MHA model, 8 / 8 = 1 of a g = 8 model.
  TensorParallelKv mha = tensor_parallel_kv(64, 64, 128, 8);
  EXPECT_EQ(mha.kv_heads_per_gpu, 8);
  EXPECT_EQ(mha.replicas, 1);
  EXPECT_EQ(mha.query_heads_per_gpu, 8);
  EXPECT_EQ(mha.elements_per_token_per_gpu, 2.0 * 8 * 128);
  TensorParallelKv gqa = tensor_parallel_kv(64, 8, 128, 8);
  EXPECT_EQ(gqa.kv_heads_per_gpu, 1);
  EXPECT_EQ(gqa.replicas, 1);
  // g < t: MQA on 8 GPUs keeps its one head on all 8; g = 2 on 8 GPUs, each head on 4.
  TensorParallelKv mqa = tensor_parallel_kv(64, 1, 128, 8);
  EXPECT_EQ(mqa.kv_heads_per_gpu, 1);
  EXPECT_EQ(mqa.replicas, 8);
  EXPECT_EQ(tensor_parallel_kv(64, 2, 128, 8).replicas, 4);
  // Summed over GPUs, the held heads are g x replicas: all of them, plus the copies.
  for (long long g : {1, 2, 4, 8, 16, 64}) {
    const TensorParallelKv tp = tensor_parallel_kv(64, g, 128, 8);
    EXPECT_EQ(tp.kv_heads_per_gpu * 8, g >= 8 ? g : g * tp.replicas) << "g = " << g;
  }
}

TEST(Ch05KvMemory, activation_savings_and_korthikantis_layer_activations) {
  EXPECT_EQ(gqa_kv_activation_saving(64, 8), 1.0 - 8.0 / 64.0);
  EXPECT_EQ(gqa_kv_activation_saving(64, 64), 0.0);
  EXPECT_EQ(mla_kv_activation_saving(512, 128, 128), 1.0 - 512.0 / 16384.0);
  // Korthikanti et al. eq. (1) term by term: 34 s b h + 5 a s^2 b.
  const long long s = 2048, b = 4, h = 4096, a = 32;
  EXPECT_NEAR(layer_activation_bytes(s, b, h, a, false), 34.0 * s * b * h + 5.0 * a * s * s * b, 1e-6);
  EXPECT_EQ(layer_activation_bytes(s, b, h, a, true), 2.0 * s * b * h);
}

TEST(Ch05KvMemory, bad_inputs_name_the_parameter) {
  EXPECT_TRUE(throws_error_naming([] { gqa_kv_elements_per_token(0, 1, 8); }, {"gqa_kv_elements_per_token", "num_heads"}));
  EXPECT_TRUE(throws_error_naming([] { gqa_kv_elements_per_token(8, 0, 8); }, {"num_kv_heads"}));
  EXPECT_TRUE(throws_error_naming([] { gqa_kv_elements_per_token(8, 1, 0); }, {"head_dim"}));
  EXPECT_TRUE(throws_error_naming([] { gqa_kv_elements_per_token(12, 5, 8); }, {"num_heads (12)", "multiple", "num_kv_heads (5)"}));
  EXPECT_TRUE(throws_error_naming([] { mla_kv_elements_per_token(0, 64); }, {"mla_kv_elements_per_token", "kv_lora_rank"}));
  EXPECT_TRUE(throws_error_naming([] { mla_kv_elements_per_token(512, -1); }, {"qk_rope_head_dim"}));
  EXPECT_TRUE(throws_error_naming([] { tpa_kv_elements_per_token(0, 2, 8, 8); }, {"tpa_kv_elements_per_token", "rank_k"}));
  EXPECT_TRUE(throws_error_naming([] { tpa_kv_elements_per_token(2, 0, 8, 8); }, {"rank_v"}));
  EXPECT_TRUE(throws_error_naming([] { tpa_kv_elements_per_token(2, 2, 0, 8); }, {"num_heads"}));
  EXPECT_TRUE(throws_error_naming([] { tpa_kv_elements_per_token(2, 2, 8, 0); }, {"head_dim"}));
  EXPECT_TRUE(throws_error_naming([] { kv_cache_size(0.0, 1, 1, 1, DType::fp16); }, {"kv_cache_size", "elements_per_token_per_layer"}));
  EXPECT_TRUE(throws_error_naming([] { kv_cache_size(8.0, 0, 1, 1, DType::fp16); }, {"num_layers"}));
  EXPECT_TRUE(throws_error_naming([] { kv_cache_size(8.0, 1, 0, 1, DType::fp16); }, {"seq_len"}));
  EXPECT_TRUE(throws_error_naming([] { kv_cache_size(8.0, 1, 1, 0, DType::fp16); }, {"batch"}));
  EXPECT_TRUE(throws_error_naming([] { bytes_per_element(static_cast<DType>(99)); }, {"bytes_per_element", "dtype"}));
  EXPECT_TRUE(throws_error_naming([] { dtype_name(static_cast<DType>(99)); }, {"dtype_name", "dtype"}));
  EXPECT_TRUE(throws_error_naming([] { dtype_from_torch_dtype("float64"); }, {"dtype_from_torch_dtype", "torch_dtype", "float64"}));
  ModelConfig broken = named_model_config("llama-2-7b");
  broken.num_key_value_heads = 5;
  EXPECT_TRUE(throws_error_naming([&] { model_kv_elements_per_token(broken); }, {"model_kv_elements_per_token", "num_key_value_heads (5)"}));
  EXPECT_TRUE(throws_error_naming([] { per_layer_gqa_kv_bytes({}, 8, 8, 1, 1, DType::fp16); }, {"per_layer_gqa_kv_bytes", "num_kv_heads_per_layer"}));
  EXPECT_TRUE(throws_error_naming([] { per_layer_gqa_kv_bytes({8, 3}, 8, 8, 1, 1, DType::fp16); }, {"num_kv_heads_per_layer[1] (3)"}));
  EXPECT_TRUE(throws_error_naming([] { per_layer_gqa_kv_bytes({8}, 0, 8, 1, 1, DType::fp16); }, {"num_heads"}));
  EXPECT_TRUE(throws_error_naming([] { per_layer_gqa_kv_bytes({8}, 8, 0, 1, 1, DType::fp16); }, {"head_dim"}));
  EXPECT_TRUE(throws_error_naming([] { per_layer_gqa_kv_bytes({8}, 8, 8, 0, 1, DType::fp16); }, {"seq_len"}));
  EXPECT_TRUE(throws_error_naming([] { per_layer_gqa_kv_bytes({8}, 8, 8, 1, 0, DType::fp16); }, {"batch"}));
  EXPECT_TRUE(throws_error_naming([] { gpus_needed(0); }, {"gpus_needed", "kv_bytes"}));
  EXPECT_TRUE(throws_error_naming([] { gpus_needed(1, -1); }, {"weight_bytes"}));
  EXPECT_TRUE(throws_error_naming([] { gpus_needed(1, 0, 0); }, {"gpu_bytes"}));
  EXPECT_TRUE(throws_error_naming([] { sequences_that_fit(0, 0, 1); }, {"sequences_that_fit", "bytes_per_sequence"}));
  EXPECT_TRUE(throws_error_naming([] { sequences_that_fit(1, -1, 1); }, {"weight_bytes"}));
  EXPECT_TRUE(throws_error_naming([] { sequences_that_fit(1, 0, 0); }, {"num_gpus"}));
  EXPECT_TRUE(throws_error_naming([] { sequences_that_fit(1, 0, 1, 0); }, {"gpu_bytes"}));
  EXPECT_TRUE(throws_error_naming([] { tensor_parallel_kv(64, 8, 128, 0); }, {"tensor_parallel_kv", "tp_size"}));
  EXPECT_TRUE(throws_error_naming([] { tensor_parallel_kv(64, 8, 128, 3); }, {"num_heads (64)", "tp_size (3)"}));
  EXPECT_TRUE(throws_error_naming([] { tensor_parallel_kv(96, 48, 128, 32); }, {"num_kv_heads (48)", "tp_size (32)"}));
  EXPECT_TRUE(throws_error_naming([] { tensor_parallel_kv(48, 3, 128, 16); }, {"tp_size (16)", "num_kv_heads (3)"}));
  EXPECT_TRUE(throws_error_naming([] { gqa_kv_activation_saving(0, 1); }, {"gqa_kv_activation_saving", "num_heads"}));
  EXPECT_TRUE(throws_error_naming([] { gqa_kv_activation_saving(8, 0); }, {"num_kv_heads"}));
  EXPECT_TRUE(throws_error_naming([] { gqa_kv_activation_saving(8, 3); }, {"multiple"}));
  EXPECT_TRUE(throws_error_naming([] { mla_kv_activation_saving(0, 8, 8); }, {"mla_kv_activation_saving", "kv_lora_rank"}));
  EXPECT_TRUE(throws_error_naming([] { mla_kv_activation_saving(8, 0, 8); }, {"num_heads"}));
  EXPECT_TRUE(throws_error_naming([] { mla_kv_activation_saving(8, 8, 0); }, {"head_dim"}));
  EXPECT_TRUE(throws_error_naming([] { mla_kv_activation_saving(65, 8, 8); }, {"kv_lora_rank (65)", "exceed"}));
  EXPECT_TRUE(throws_error_naming([] { layer_activation_bytes(0, 1, 8, 1, false); }, {"layer_activation_bytes", "seq_len"}));
  EXPECT_TRUE(throws_error_naming([] { layer_activation_bytes(1, 0, 8, 1, false); }, {"batch"}));
  EXPECT_TRUE(throws_error_naming([] { layer_activation_bytes(1, 1, 0, 1, false); }, {"hidden_size"}));
  EXPECT_TRUE(throws_error_naming([] { layer_activation_bytes(1, 1, 8, 0, false); }, {"num_heads"}));
}

}  // namespace
}  // namespace tvlab::kv
