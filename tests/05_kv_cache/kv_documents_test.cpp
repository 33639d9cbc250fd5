// Chapter 05: the documents' worked numbers on the KV cache (inventory 05.C, and the checkable
// claims of 05.D), each computed from the document's inputs with tvlab's calculators. Where a
// document is right, the test shows the computation gives its value to the precision it states;
// where it is wrong, the test asserts the correct value and a comment says what the document says
// (chapters/05_kv_cache/notes_documents.md lists them all). Citations: 000 = the book chapter
// "Transformer 演进与变体", 004 = chapter 8 "现代大模型架构", with line numbers of ../shared/seeds.
// Sizes are products of integers, exact in double: equalities are exact unless a tolerance is stated.

#include <gtest/gtest.h>

#include <cmath>

#include "tvlab/analysis/kv_memory.hpp"
#include "tvlab/core/kv_quant.hpp"
#include "tvlab/core/model_config.hpp"

namespace tvlab::kv {
namespace {

using namespace tvlab::analysis;

constexpr double kKiB = 1024.0, kMiB = 1024.0 * 1024.0, kGiB = 1024.0 * 1024.0 * 1024.0;

// The documents' LLaMA-2 70B example (000 L141-L147): h = 64, d_k = 128, 80 layers, FP16, and every
// head with its own K and V (MHA). The published model has 8 key-value heads (GQA): see real_llama_2_70b.
constexpr long long kHeads = 64, kHeadDim = 128, kLayers = 80, kContext = 4096;

KvCacheSize documents_llama_2_70b_mha(long long seq_len) {
  return kv_cache_size(gqa_kv_elements_per_token(kHeads, kHeads, kHeadDim), kLayers, seq_len, 1, DType::fp16);
}

// Llama 2 70B's FP16 weights from its published shape (huggingface.co/meta-llama/Llama-2-70b-hf
// config.json: hidden 8192, intermediate 28672, vocab 32000, 64 heads, 8 kv heads of 128, 80 layers,
// untied embeddings): per layer W_Q, W_O (d x d), W_K, W_V (d x g d_h), the SwiGLU FFN (3 d d_ff)
// and two RMSNorm weight vectors; then the input embedding, the final norm and the output head.
double llama_2_70b_weight_bytes() {
  const double d = 8192, d_ff = 28672, vocab = 32000, kv = 8 * 128, layers = 80;
  const double per_layer = 2 * d * d + 2 * d * kv + 3 * d * d_ff + 2 * d;
  return 2.0 * (layers * per_layer + 2 * vocab * d + d);  // 2 bytes per FP16 parameter
}

TEST(Ch05Documents, x1_one_layer_of_llama_2_70b_as_mha_at_4096_tokens_is_128_mib) {
  // 000 L143: 2 x 4096 x 64 x 128 x 2 = "128 MB" (binary megabytes).
  EXPECT_EQ(documents_llama_2_70b_mha(kContext).bytes_per_layer, 128 * kMiB);
  // Per token per layer: 2 h d_k x 2 bytes = 32 KiB.
  EXPECT_EQ(documents_llama_2_70b_mha(kContext).bytes_per_token_per_layer, 32 * kKiB);
}

TEST(Ch05Documents, x2_x11_eighty_layers_make_10_gib_and_32k_and_128k_scale_linearly) {
  // 000 L145: 128 x 80 ~ "10 GB", 32K "80 GB", 128K "320 GB": binary units, exact.
  EXPECT_EQ(documents_llama_2_70b_mha(kContext).bytes_per_sequence, 10 * kGiB);
  EXPECT_EQ(documents_llama_2_70b_mha(32 * 1024).bytes_per_sequence, 80 * kGiB);
  EXPECT_EQ(documents_llama_2_70b_mha(128 * 1024).bytes_per_sequence, 320 * kGiB);
  // 004 L49: the same cache, "about 10.7 GB" in decimal units.
  EXPECT_NEAR(documents_llama_2_70b_mha(kContext).bytes_per_sequence / 1e9, 10.7, 0.05);
  // 000 L145: weights "about 140 GB" (FP16): 68.98e9 parameters, 137.96 GB; 140 to two digits.
  EXPECT_NEAR(llama_2_70b_weight_bytes() / 1e9, 137.96, 0.01);
  EXPECT_EQ(std::round(llama_2_70b_weight_bytes() / 1e10) * 10, 140);
}

TEST(Ch05Documents, x2_note_the_published_llama_2_70b_caches_one_eighth_of_that) {
  // The published model has num_key_value_heads = 8, so its 4K cache is 1.25 GiB, not 10 GiB
  // (000 L143 calls the 64-head MHA shape "LLaMA-2 70B"; 000 L183 later treats g = 8 as an option).
  const KvCacheSize real = kv_cache_size(named_model_config("llama-2-70b"), kContext, 1, DType::fp16);
  EXPECT_EQ(real.bytes_per_sequence, 1.25 * kGiB);
  EXPECT_EQ(documents_llama_2_70b_mha(kContext).bytes_per_sequence / real.bytes_per_sequence, 8);
}

TEST(Ch05Documents, x3_two_80_gb_gpus_hold_two_4k_mha_conversations_beside_the_weights) {
  // 000 L147: 2 x A100 80 GB, 140 GB of weights: "about two 4K conversations".
  const double per_conversation = documents_llama_2_70b_mha(kContext).bytes_per_sequence;
  EXPECT_EQ(sequences_that_fit(per_conversation, llama_2_70b_weight_bytes(), 2, 80e9), 2);
  // With the published GQA cache (1.25 GiB) the same server holds 16.
  const double real = kv_cache_size(named_model_config("llama-2-70b"), kContext, 1, DType::fp16).bytes_per_sequence;
  EXPECT_EQ(sequences_that_fit(real, llama_2_70b_weight_bytes(), 2, 80e9), 16);
}

TEST(Ch05Documents, x4_x12_mqa_divides_the_cache_by_64_to_160_mib) {
  // 000 L169: MQA (g = 1): "10 GB -> about 160 MB, 1/64"; "tens to hundreds of requests".
  const KvCacheSize mqa =
      kv_cache_size(gqa_kv_elements_per_token(kHeads, 1, kHeadDim), kLayers, kContext, 1, DType::fp16);
  EXPECT_EQ(mqa.bytes_per_sequence, 160 * kMiB);
  EXPECT_EQ(documents_llama_2_70b_mha(kContext).bytes_per_sequence / mqa.bytes_per_sequence, 64);
  const long long requests = sequences_that_fit(mqa.bytes_per_sequence, llama_2_70b_weight_bytes(), 2, 80e9);
  EXPECT_EQ(requests, 131);  // floor(22.04 GB / 167.8 MB): "tens to hundreds"
  // 004 L57: MQA on a 64-head model "reduces about 98%": 1 - 1/64 = 98.4%.
  EXPECT_NEAR(1.0 - mqa.bytes_per_sequence / documents_llama_2_70b_mha(kContext).bytes_per_sequence, 0.98, 0.005);
}

TEST(Ch05Documents, x5_gqa_with_8_groups_gives_1_25_gib_eight_times_less) {
  // 000 L183: g = 8: "10 GB -> 1.25 GB, 8x".
  const KvCacheSize gqa =
      kv_cache_size(gqa_kv_elements_per_token(kHeads, 8, kHeadDim), kLayers, kContext, 1, DType::fp16);
  EXPECT_EQ(gqa.bytes_per_sequence, 1.25 * kGiB);
  EXPECT_EQ(documents_llama_2_70b_mha(kContext).bytes_per_sequence / gqa.bytes_per_sequence, 8);
}

TEST(Ch05Documents, x6_x14_deepseek_v2_mla_caches_576_values_a_token_57_times_less_than_mha) {
  const ModelConfig& v2 = named_model_config("deepseek-v2");
  const double mha = gqa_kv_elements_per_token(v2.num_attention_heads, v2.num_attention_heads, v2.head_dim);
  // 000 L197 and 004 L57: MHA 2 x 128 x 128 = 32,768 values, 65,536 bytes in FP16 (= 64 KiB): right.
  EXPECT_EQ(mha, 32768);
  EXPECT_EQ(mha * bytes_per_element(DType::fp16), 64 * kKiB);
  // 000 L197: the latent alone is 512 values, 1 KiB in FP16: right, and 32,768 / 512 = 64 ...
  EXPECT_EQ(mla_kv_elements_per_token(v2.kv_lora_rank, 0) * 2, 1 * kKiB);
  // ... but MLA also caches the decoupled RoPE key k^R (d_h^R = 64, shared by the heads;
  // arXiv:2405.04434 eq. (15) and Table 1): 576 values = 1,152 bytes, a ratio of 56.9, not 64.
  const double mla = model_kv_elements_per_token(v2);
  EXPECT_EQ(mla, 576);
  EXPECT_EQ(mla * bytes_per_element(DType::fp16), 1152);
  EXPECT_NEAR(mha / mla, 56.89, 0.005);
  // 004 L57 says MLA needs "2 x 512 x 2 = 2,048 bytes", "about 32x": the latent is one vector for
  // K and V together, so the factor 2 for K and V does not apply. Correct: 1,152 bytes, 56.9x
  // (1,024 bytes and 64x without the RoPE key).
}

TEST(Ch05Documents, x7_deepseek_v3_caches_about_one_57th_of_an_equal_mha) {
  // 000 L207: "about 1/57": (d_c + d_h^R) / (2 h d_h) = 576 / 32768 = 1/56.9.
  const ModelConfig& v3 = named_model_config("deepseek-v3");
  const double mha = gqa_kv_elements_per_token(v3.num_attention_heads, v3.num_attention_heads, v3.head_dim);
  EXPECT_EQ(std::round(mha / model_kv_elements_per_token(v3)), 57);
}

TEST(Ch05Documents, x8_a_rank_10_factorisation_of_a_1000_square_stores_20000_values_50_times_less) {
  // 000 L217: 1000 x 1000 as two 1000 x 10 factors: 20,000 values, 50x.
  const double full = 1000.0 * 1000.0, factors = 2 * 1000.0 * 10.0;
  EXPECT_EQ(factors, 20000);
  EXPECT_EQ(full / factors, 50);
}

TEST(Ch05Documents, x9_tpa_with_rank_2_keys_and_values_saves_about_90_percent) {
  // 000 L223: "about 90% memory saving". With key and value ranks R_K = R_V = 2 (the default of the
  // authors' T6Config, "rank = 2 # CP rank for key and value", github.com/tensorgi/T6) on a
  // 32-head, d_h = 128 layer:
  // 1 - (2 + 2)(32 + 128) / (2 x 32 x 128) = 1 - 640 / 8192 = 92.2%. The saving depends on the ranks
  // and the shape (rank 4 gives 84.4%), so "about 90%" holds for rank 2 only.
  const double mha = gqa_kv_elements_per_token(32, 32, 128);
  EXPECT_NEAR(1.0 - tpa_kv_elements_per_token(2, 2, 32, 128) / mha, 0.90, 0.025);
  EXPECT_NEAR(1.0 - tpa_kv_elements_per_token(4, 4, 32, 128) / mha, 0.844, 0.001);
}

TEST(Ch05Documents, x10_a_32_layer_mha_model_at_a_million_tokens_needs_half_a_terabyte_and_7_gpus) {
  // 004 L42: 32 layers, 32 heads, d = 128, BF16, 1M tokens: "2 x 32 x 32 x 128 x 10 x 2 bytes" (the
  // 10 is a garbled 10^6), "order of 512 GB", "about 7 80 GB H100".
  const KvCacheSize s =
      kv_cache_size(gqa_kv_elements_per_token(32, 32, 128), 32, 1000000, 1, DType::bf16);
  EXPECT_EQ(s.bytes_total, 524.288e9);  // 512 KiB a token x 10^6 tokens: 524 GB = 488 GiB
  EXPECT_NEAR(s.bytes_total / 512e9, 1.0, 0.05);  // "order of 512 GB"
  EXPECT_EQ(gpus_needed(s.bytes_total, 0, 80e9), 7);
}

TEST(Ch05Documents, x13_table_8_3_gives_the_wrong_group_ratios) {
  // 004 L57 (Table 8-3): "GQA (g = h/4) ... LLaMA 2 70B", "GQA (g = h/8) ... LLaMA 3 405B".
  // The published configs: Llama 2 70B has h = 64, g = 8, so g = h/8; Llama 3.1 405B has h = 128,
  // g = 8, so g = h/16.
  EXPECT_EQ(named_model_config("llama-2-70b").group_size(), 8);
  EXPECT_EQ(named_model_config("llama-3.1-405b").group_size(), 16);
  // 004 L57 elsewhere: LLaMA 3 405B "h = 128, g = 8": right.
  EXPECT_EQ(named_model_config("llama-3.1-405b").num_attention_heads, 128);
  EXPECT_EQ(named_model_config("llama-3.1-405b").num_key_value_heads, 8);
}

TEST(Ch05Documents, x15_the_decoupled_rope_key_adds_64_values_a_token_not_8192) {
  // 004 L57: decoupled RoPE adds "h x d_R = 8192" cached dimensions "(vs the standard h x d_k = 16384)".
  // DeepSeek-V2 computes one k^R per token from h_t and shares it by all heads (arXiv:2405.04434
  // eq. (15)); only the query part q^R is per head. Extra cache: d_h^R = 64 values.
  const ModelConfig& v2 = named_model_config("deepseek-v2");
  EXPECT_EQ(model_kv_elements_per_token(v2) - mla_kv_elements_per_token(v2.kv_lora_rank, 0), 64);
  EXPECT_EQ(v2.num_attention_heads * v2.head_dim, 16384);  // h x d_k of a standard K: right
}

TEST(Ch05Documents, x16_x17_mla_caches_1_8_percent_of_an_equal_mha_not_7_or_one_32nd) {
  const ModelConfig& v2 = named_model_config("deepseek-v2");
  const double mha = gqa_kv_elements_per_token(v2.num_attention_heads, v2.num_attention_heads, v2.head_dim);
  const double ratio = model_kv_elements_per_token(v2) / mha;
  // 004 L47 (Table 8-2): MLA "about 7%"; 004 L57 (Figure 8-5): "d_c / (h x d_k)" = 512 / 16384 = 1/32.
  // The cache of K and V is 2 h d_k, and the latent comes with the RoPE key: (d_c + d_h^R) / (2 h d_h).
  EXPECT_NEAR(ratio, 0.0176, 0.00005);
  EXPECT_EQ(static_cast<double>(v2.kv_lora_rank) / (v2.num_attention_heads * v2.head_dim), 1.0 / 32);
  EXPECT_NEAR(1.0 / ratio, 56.89, 0.005);
}

TEST(Ch05Documents, x18_tensor_parallel_gqa_8_holds_87_5_percent_less_kv_per_gpu_than_mha) {
  // 004 L63: on 8 GPUs, "GQA (g = 8) reduces KV communication by about 87% against MHA". With the
  // 64-head model of the examples, MHA puts 8 kv heads on each GPU and GQA one: 1 - 1/8 = 87.5%.
  const TensorParallelKv mha = tensor_parallel_kv(kHeads, kHeads, kHeadDim, 8);
  const TensorParallelKv gqa = tensor_parallel_kv(kHeads, 8, kHeadDim, 8);
  EXPECT_NEAR(1.0 - gqa.elements_per_token_per_gpu / mha.elements_per_token_per_gpu, 0.87, 0.006);
  EXPECT_EQ(1.0 - gqa.elements_per_token_per_gpu / mha.elements_per_token_per_gpu, gqa_kv_activation_saving(kHeads, 8));
  // The figure is 1 - g/h, so it needs h = 64: for a 32-head model (Llama 3 8B) it is 75%.
  EXPECT_EQ(1.0 - tensor_parallel_kv(32, 8, 128, 8).elements_per_token_per_gpu /
                      tensor_parallel_kv(32, 32, 128, 8).elements_per_token_per_gpu,
            0.75);
}

TEST(Ch05Documents, x19_llama_3_8b_gqa_int8_at_4k_is_256_mib_eight_times_less) {
  // 004 L63: LLaMA 3 8B, 4K: "MHA+FP16 2 GB -> GQA+INT8 128 MB, 16x".
  const ModelConfig& llama = named_model_config("llama-3-8b");
  ModelConfig as_mha = llama;
  as_mha.num_key_value_heads = as_mha.num_attention_heads;
  const double mha_fp16 = kv_cache_size(as_mha, 4096, 1, DType::fp16).bytes_total;
  const double gqa_int8 = kv_cache_size(llama, 4096, 1, DType::int8).bytes_total;
  EXPECT_EQ(mha_fp16, 2 * kGiB);  // right
  // h / g = 32 / 8 = 4 from the heads, 2 from FP16 -> INT8: 8x, 256 MiB (the document: 16x, 128 MB).
  EXPECT_EQ(gqa_int8, 256 * kMiB);
  EXPECT_EQ(mha_fp16 / gqa_int8, 8);
  // With the scales a real INT8 cache stores (one float32 per token and kv head of 128 values) the
  // ratio falls below 8, to (h / g) 2 d / (d + 4) = 7.76: INT8 cannot reach 16x.
  const double L = 32, h = 32, g = 8, d = 128, n = 4096;
  const double int8_with_scales = 2 * L * n * kv_bytes_per_token(int8_per_token(128), 8, 128);
  EXPECT_NEAR(mha_fp16 / int8_with_scales, (h / g) * 2 * d / (d + 4), 1e-12);
  EXPECT_LT(mha_fp16 / int8_with_scales, 8.0);
  // 128 MB and 16x are GQA + INT4 (half a byte an element): 15.1x with a scale and a minimum per 128.
  const double int4_with_scales = 2 * L * n * kv_bytes_per_token(int4_per_group(128, true), 8, 128);
  EXPECT_NEAR(mha_fp16 / int4_with_scales, (h / g) * 4 * d / (d + 8), 1e-12);
}

TEST(Ch05Documents, x20_deepseek_v3_latent_in_int4_is_256_bytes_a_token_and_layer) {
  // 004 L63: d_c = 512 in INT4, "about 512 bytes per token". 512 values x 4 bits = 256 bytes per
  // layer (288 with the RoPE key also in INT4); a token through all 61 layers: 17,568 bytes.
  const ModelConfig& v3 = named_model_config("deepseek-v3");
  EXPECT_EQ(mla_kv_elements_per_token(v3.kv_lora_rank, 0) * bytes_per_element(DType::int4), 256);
  const KvCacheSize s = kv_cache_size(v3, 1, 1, DType::int4);
  EXPECT_EQ(s.bytes_per_token_per_layer, 288);
  EXPECT_EQ(s.bytes_per_token, 288.0 * 61);
  // 512 bytes is the latent in INT8 (one layer).
  EXPECT_EQ(mla_kv_elements_per_token(v3.kv_lora_rank, 0) * bytes_per_element(DType::int8), 512);
  // A stored INT4 latent also keeps its scales: 8 groups of 64 with a float32 scale and minimum,
  // 64 bytes more; INT8 with one scale per token: 512 + 4.
  const std::size_t d_c = 512;
  EXPECT_EQ(kv_bytes_per_token(int4_per_group(64), 1, d_c), d_c / 2.0 + (d_c / 64) * 8.0);
  EXPECT_EQ(kv_bytes_per_token(int8_per_token(d_c), 1, d_c), d_c + 4.0);
}

TEST(Ch05Documents, x21_the_documents_mla_formula_gives_97_percent_for_deepseek_v2_not_60) {
  // 004 L63: GQA saves 1 - g/h, MLA 1 - d_c/(h d_k) of the activation memory; for DeepSeek-V2,
  // "MLA saves about 60%". The document's own formula: 1 - 512 / (128 x 128) = 96.9%.
  const ModelConfig& v2 = named_model_config("deepseek-v2");
  EXPECT_NEAR(mla_kv_activation_saving(v2.kv_lora_rank, v2.num_attention_heads, v2.head_dim), 0.969, 0.0005);
}

TEST(Ch05Documents, x22_the_mha_configurations_have_d_model_equal_to_h_times_d_k) {
  // 000 L159: original Transformer 8 heads, d_model 512, d_k 64; GPT-3 96 heads, d_model 12288, d_k 128.
  EXPECT_EQ(512 / 8, 64);
  EXPECT_EQ(12288 / 96, 128);
  // GPT-2 Large per its config (huggingface.co/openai-community/gpt2-large: n_layer 36, n_head 20,
  // n_embd 1280) has d_k = 64 like every GPT-2; the document's "24 layers, 16 heads" is GPT-2 Medium
  // (n_embd 1024, 16 x 64). Its cache per token: 2 x 36 x 1280 values.
  EXPECT_EQ(1280 / 20, 64);
  EXPECT_EQ(gqa_kv_elements_per_token(20, 20, 64) * 36, 2.0 * 36 * 1280);
}

TEST(Ch05Documents, c1_decode_attention_does_about_one_flop_per_cached_byte) {
  // 004 L42 (05-C1): decoding reads the whole cache for each new token and is memory-bound. Per new
  // token and layer, attention does 4 h d_h n FLOPs (q.k and p.v over n keys) and reads 2 g d_h n b
  // bytes: an intensity of 2 h / (g b) FLOPs per byte. MHA in BF16: 1; GQA h/g = 4: 4; far below the
  // hundreds of FLOPs per byte a GPU needs to be compute-bound.
  const long long h = 32, d = 128, n = 1000000;
  for (long long g : {32LL, 8LL}) {
    const double flops = 4.0 * h * d * n;
    const double bytes = kv_cache_size(gqa_kv_elements_per_token(h, g, d), 1, n, 1, DType::bf16).bytes_total;
    EXPECT_EQ(flops / bytes, 2.0 * h / (g * 2.0)) << "g = " << g;
  }
}

}  // namespace
}  // namespace tvlab::kv
