// Chapter 08, model sizes from configs: the parameter counts of published models (the totals their
// Hugging Face model cards and loaders report), the documents' 140 GB and its mixed-precision
// recipe computed component by component, and bad input.

#include <gtest/gtest.h>

#include "../common/testing.hpp"
#include "tvlab/analysis/model_size.hpp"

namespace tvlab::analysis {
namespace {

using tvlab::testing::throws_error_naming;

// Totals that Hugging Face's LlamaForCausalLM / MistralForCausalLM count for these configs.
TEST(Ch08ModelSize, parameter_counts_of_published_models) {
  EXPECT_EQ(decoder_parameters(decoder_shape("llama-2-7b")).total(), 6738415616LL);
  EXPECT_EQ(decoder_parameters(decoder_shape("llama-2-70b")).total(), 68976648192LL);
  EXPECT_EQ(decoder_parameters(decoder_shape("llama-3-8b")).total(), 8030261248LL);
  EXPECT_EQ(decoder_parameters(decoder_shape("mistral-7b")).total(), 7241732096LL);
}

// One LLaMA-2 70B layer by hand: Q and O 8192^2 each, K and V 8192 x 1024 each, the FFN 3 x 8192 x
// 28672, two norms of 8192.
TEST(Ch08ModelSize, one_layer_by_hand) {
  DecoderShape one = decoder_shape("llama-2-70b");
  one.num_hidden_layers = 1;
  const DecoderParameters p = decoder_parameters(one);
  EXPECT_EQ(p.qkv, 8192LL * 8192 + 2 * 8192LL * 1024);
  EXPECT_EQ(p.output, 8192LL * 8192);
  EXPECT_EQ(p.ffn, 3 * 8192LL * 28672);
  EXPECT_EQ(p.norms, 3 * 8192LL);
}

// The documents: 140 GB in FP16 (000 L241) is 137.95 GB; the mixed recipe of 000 L257 (QKV INT8,
// FFN INT4, the norms FP16; O, the embedding and the output layer not named: here O INT8 with the
// attention, embedding and output layer FP16) is 3.34 times smaller, not "about 4". Expected values
// from the layer formula, by hand: attention 80 (2 x 8192^2 + 2 x 8192 x 1024), FFN 80 x 3 x 8192 x
// 28672, embedding and output 2 x 32000 x 8192, norms 161 x 8192.
TEST(Ch08ModelSize, the_documents_llama_2_70b_sizes) {
  const DecoderParameters p = decoder_parameters(decoder_shape("llama-2-70b"));
  const double attention = 80.0 * (2.0 * 8192 * 8192 + 2.0 * 8192 * 1024), ffn = 80.0 * 3 * 8192 * 28672,
               rest = 2.0 * 32000 * 8192 + 161.0 * 8192;
  const double fp16 = model_bytes(p, {});
  EXPECT_DOUBLE_EQ(fp16, 2.0 * (attention + ffn + rest));
  EXPECT_NEAR(fp16 / 1e9, 137.95, 0.01);
  BitAllocation mixed;
  mixed.qkv = 8, mixed.output = 8, mixed.ffn = 4;
  const double bytes = model_bytes(p, mixed);
  EXPECT_DOUBLE_EQ(bytes, attention + ffn / 2.0 + 2.0 * rest);
  EXPECT_NEAR(fp16 / bytes, 3.34, 0.01) << "the documents say about 4";
  // every weight matrix at 4 bits (codes only), embedding and output layer still 16: 3.91 times
  BitAllocation int4;
  int4.qkv = int4.output = int4.ffn = 4;
  EXPECT_DOUBLE_EQ(model_bytes(p, int4), (attention + ffn) / 2.0 + 2.0 * rest);
  EXPECT_NEAR(fp16 / model_bytes(p, int4), 3.91, 0.01);
}

TEST(Ch08ModelSize, bad_input_is_named) {
  EXPECT_TRUE(throws_error_naming([] { decoder_shape("gpt-9"); }, {"decoder_shape", "gpt-9", "llama-2-70b"}));
  DecoderShape s = decoder_shape("llama-2-7b");
  s.num_key_value_heads = 5;
  EXPECT_TRUE(throws_error_naming([&] { decoder_parameters(s); }, {"decoder_parameters", "num_key_value_heads (5)"}));
  BitAllocation b;
  b.ffn = 0;
  EXPECT_TRUE(throws_error_naming([&] { model_bytes(decoder_parameters(decoder_shape("llama-2-7b")), b); },
                                  {"model_bytes", "positive"}));
}

}  // namespace
}  // namespace tvlab::analysis
