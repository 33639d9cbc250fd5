// Chapter 00: the documents' worked numbers, computed from their inputs, and the errata they imply.
// Every expected value below is derived in the test from first principles; where a document
// states something else, the test asserts the correct value and names the erratum.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>

#include "tvlab/analysis/attention_cost.hpp"
#include "tvlab/analysis/scaling.hpp"
#include "tvlab/core/error.hpp"

namespace tvlab::analysis {
namespace {

constexpr double kMB = 1e6, kGB = 1e9, kGiB = 1073741824.0;

TEST(Ch00Documents, s_and_a_at_n_8192_in_fp16_per_head) {
  // 000: "S and A each have 8192 x 8192 = 67,108,864 elements; 2 x 67,108,864 x 2 = 268 MB".
  const auto m = attention_matrix_memory(8192, 1, 1, DType::fp16);
  EXPECT_EQ(m.elements_per_matrix, 8192.0 * 8192.0);
  EXPECT_EQ(m.bytes_per_head, 2.0 * 8192 * 8192 * 2);
  EXPECT_NEAR(m.bytes_per_head / kMB, 268.4, 0.05);  // decimal MB; exactly 256 MiB
  EXPECT_EQ(m.bytes_per_head, 256.0 * 1024 * 1024);
}

TEST(Ch00Documents, per_layer_memory_multiplies_by_heads) {
  // Erratum E2: the document calls 268 MB "one attention layer"; a layer has h heads, each with S and A.
  const auto one_head = attention_matrix_memory(8192, 1, 1, DType::fp16);
  const auto gpt3_layer = attention_matrix_memory(8192, 96, 1, DType::fp16);
  EXPECT_EQ(gpt3_layer.bytes_per_layer, 96 * one_head.bytes_per_head);
  EXPECT_NEAR(gpt3_layer.bytes_per_layer / kGB, 25.77, 0.01);
}

TEST(Ch00Documents, encoder_decoder_has_three_attention_sublayers_per_layer_pair) {
  // Erratum E3: the document's "268 x 6 x 2 = 3.2 GB" counts 12 attention blocks; the decoder
  // also has cross-attention, so 6 + 6 + 6 = 18 blocks (per head).
  const auto doc_count = attention_matrix_memory(8192, 1, 6 * 2, DType::fp16);
  const auto correct = attention_matrix_memory(8192, 1, 6 * 3, DType::fp16);
  EXPECT_NEAR(doc_count.bytes_total / kGB, 3.22, 0.005);  // the document's arithmetic is right for 12
  EXPECT_NEAR(correct.bytes_total / kGB, 4.83, 0.005);
}

TEST(Ch00Documents, gpt3_96_layers_is_25_8_gb_per_head_not_25_1) {
  // Erratum E4: 268.4 MB x 96 = 25.77 GB = 24.0 GiB; "25.1 GB" mixed a decimal MB with a /1024.
  const auto m = attention_matrix_memory(8192, 1, 96, DType::fp16);
  EXPECT_NEAR(m.bytes_total / kGB, 25.77, 0.005);
  EXPECT_NEAR(m.bytes_total / kGiB, 24.0, 1e-9);
  EXPECT_GT(std::fabs(m.bytes_total / kGB - 25.1), 0.5);
  const double documents_mixed_units = 268.0 * 96 / 1024;  // how 25.1 arises
  EXPECT_NEAR(documents_mixed_units, 25.1, 0.05);
}

TEST(Ch00Documents, essay_single_float32_matrix) {
  // 003: n = 8192 float32, one matrix: 8192 x 8192 x 4 bytes ~ 268 MB (correct, per head).
  const auto m = attention_matrix_memory(8192, 1, 1, DType::fp32, 1);
  EXPECT_EQ(m.bytes_per_head, 8192.0 * 8192 * 4);
  EXPECT_NEAR(m.bytes_per_head / kMB, 268.4, 0.05);
}

TEST(Ch00Documents, gpt3_attention_ffn_split) {
  // 000: GPT-3, n = 2048, d = 12288, d_ff = 49152, 96 layers.
  const auto macs = layer_macs(2048, 12288, 49152);
  const double n = 2048, d = 12288, f = 49152;
  EXPECT_EQ(macs.ffn, 2 * n * d * f);
  EXPECT_EQ(macs.attention(), 4 * n * d * d + 2 * n * n * d);
  // Erratum E6: the FFN's 2.5e12 per layer are MACs; in FLOPs it is twice that.
  EXPECT_NEAR(macs.ffn / 1e12, 2.474, 0.001);
  EXPECT_NEAR(2 * macs.ffn / 1e12, 4.948, 0.001);
  EXPECT_NEAR(96 * macs.ffn / 1e14, 2.375, 0.001);
  // Erratum E7: attention is 1.34e12 MACs per layer; the document's 1.2e12 drops 2 n^2 d.
  EXPECT_NEAR(macs.attention() / 1e12, 1.340, 0.001);
  EXPECT_NEAR(macs.qkvo_projection / 1e12, 1.237, 0.001);  // what 1.2e12 actually is
  EXPECT_NEAR(96 * macs.attention() / 1e14, 1.286, 0.001);
  // Erratum E8: the FFN share is 8d / (12d + 2n) = 64.9 %, not 67 %.
  EXPECT_NEAR(macs.ffn_share(), 8 * d / (12 * d + 2 * n), 1e-12);
  EXPECT_NEAR(macs.ffn_share(), 0.649, 0.001);
}

TEST(Ch00Documents, gpt3_parameter_split) {
  // 000: FFN 2 x 12288 x 49152 ~ 1.2B per layer, ~115B over 96 layers (66 %), attention 34 %.
  const auto p = layer_params(12288, 49152);
  EXPECT_EQ(p.ffn, 2.0 * 12288 * 49152);
  EXPECT_NEAR(96 * p.ffn / 1e9, 115.96, 0.01);            // Erratum E9: 116B, not 115B
  EXPECT_NEAR(96 * p.ffn / 175e9, 0.663, 0.001);          // 66 % is right
  EXPECT_NEAR(96 * p.attention / 175e9, 0.331, 0.001);    // attention alone is 33.1 %
  EXPECT_EQ(p.ffn / p.attention, 2.0);                    // "twice the attention sublayer": exactly 2
}

TEST(Ch00Documents, multi_head_adds_no_parameters) {
  // Erratum E11: with d_k = d / h the projections are d x d whatever h is.
  for (long long d : {512, 768, 12288}) EXPECT_EQ(layer_params(d, 4 * d).attention, 4.0 * d * d);
}

TEST(Ch00Documents, variance_of_dot_products_grows_with_head_dim) {
  // 003: Var(q . k) = d_k for unit-variance independent entries; dividing by sqrt(d_k) restores 1.
  // 4000 x 8 samples: the sample variance has relative std sqrt(2 / 32000) ~ 0.8 %; allow 5 sigma.
  for (int d_k : {16, 64, 256}) {
    const ScalingStats s = dot_product_scaling(d_k, 4000, 8, 123 + d_k);
    EXPECT_NEAR(s.var_unscaled / d_k, 1.0, 0.05) << "d_k = " << d_k;
    EXPECT_NEAR(s.var_scaled, 1.0, 0.05) << "d_k = " << d_k;
  }
}

TEST(Ch00Documents, unscaled_softmax_saturates_and_its_jacobian_vanishes) {
  const ScalingStats small = dot_product_scaling(4, 2000, 64, 1);
  const ScalingStats large = dot_product_scaling(512, 2000, 64, 1);
  // Scaled: the logits keep unit variance, so the statistics barely move with d_k.
  EXPECT_NEAR(large.max_weight_scaled, small.max_weight_scaled, 0.05);
  // Unscaled with d_k = 512: logits of std ~22, the softmax is nearly one-hot, its Jacobian tiny.
  EXPECT_GT(large.max_weight_unscaled, 0.9);
  EXPECT_LT(large.jacobian_unscaled, 0.25 * large.jacobian_scaled);
}

TEST(Ch00Documents, softmax_jacobian_closed_form) {
  // ||diag(p) - p p^T||_F computed entry by entry vs the closed form.
  const double p[] = {0.1, 0.2, 0.3, 0.4};
  double sum = 0.0;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const double jij = (i == j ? p[i] : 0.0) - p[i] * p[j];
      sum += jij * jij;
    }
  EXPECT_NEAR(softmax_jacobian_frobenius(p, 4), std::sqrt(sum), 1e-15);
  const double one_hot[] = {0.0, 1.0, 0.0};
  EXPECT_EQ(softmax_jacobian_frobenius(one_hot, 3), 0.0);
}

TEST(Ch00Documents, calculators_reject_bad_sizes) {
  EXPECT_THROW(attention_matrix_memory(0, 1, 1, DType::fp16), tvlab::Error);
  EXPECT_THROW(attention_matrix_memory(8, 1, 1, DType::fp16, 3), tvlab::Error);
  EXPECT_THROW(layer_macs(8, -1, 4), tvlab::Error);
  try {
    dot_product_scaling(0, 1, 1, 0);
    FAIL() << "expected tvlab::Error";
  } catch (const tvlab::Error& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim"), std::string::npos) << e.what();
  }
}

TEST(Ch00Documents, format_bytes_shows_both_units) {
  EXPECT_EQ(format_bytes(268435456.0), "268.4 MB (256.0 MiB)");
}

TEST(Ch00Documents, multi_head_costs_no_parameters_over_one_head_of_the_same_width) {
  // 003 §2.3: multi-head attention's extra parameters "are not large". Counted from the shapes:
  // W_Q, W_K, W_V are [d, h d_k] with h d_k biases each, W_O is [h d_k, d] with d biases. With
  // d_k = d/h, h d_k = d, so every h gives 4 d^2 + 4 d: no extra parameters at all.
  const double d = 512;
  const double like_for_like = 4 * d * d + 4 * d;
  EXPECT_EQ(attention_params(512, 1, 512, true), like_for_like);
  for (long long h : {2LL, 8LL, 64LL, 512LL})
    EXPECT_EQ(attention_params(512, h, 512 / h, true), like_for_like) << "h = " << h << ", d_k = " << 512 / h;
  // Against a bare head without W_O, the output projection is the difference: d^2 + d.
  EXPECT_EQ(attention_params(512, 8, 64, true) - attention_params(512, 1, 512, false), d * d + d);
  // Heads that are not split (d_k = d each) multiply every projection by h.
  EXPECT_EQ(attention_params(512, 8, 512, true), 3 * (d * 8 * d + 8 * d) + 8 * d * d + d);
}

TEST(Ch00Documents, h_heads_do_the_matrix_work_of_one_wide_head_but_h_softmaxes) {
  // 000 L155: h heads take about the time of one large head. The products QK^T and PV are
  // h x 2 n^2 d_k multiply-adds each, 4 n^2 d FLOPs when h d_k = d; the scores are h n^2.
  const double n = 1024, d = 512;
  const auto one = attention_core_work(1024, 1, 512), eight = attention_core_work(1024, 8, 64);
  EXPECT_EQ(one.matmul_flops, 4 * n * n * d);
  EXPECT_EQ(eight.matmul_flops, one.matmul_flops);
  EXPECT_EQ(one.exponentials, n * n);
  EXPECT_EQ(eight.exponentials, 8 * n * n);
  EXPECT_EQ(eight.score_elements, 8 * one.score_elements);
}

TEST(Ch00Documents, head_counts_reject_sizes_that_are_not_positive) {
  for (const auto& [call, parameter] :
       {std::pair<std::function<void()>, std::string>{[] { attention_params(0, 1, 1, true); }, "d_model"},
        {[] { attention_params(8, -2, 4, true); }, "num_heads"},
        {[] { attention_params(8, 2, 0, false); }, "head_dim"},
        {[] { attention_core_work(0, 1, 1); }, "seq"},
        {[] { attention_core_work(4, 0, 1); }, "num_heads"},
        {[] { attention_core_work(4, 1, -1); }, "head_dim"}}) {
    try {
      call();
      ADD_FAILURE() << "expected tvlab::Error naming " << parameter;
    } catch (const tvlab::Error& e) {
      EXPECT_NE(std::string(e.what()).find(parameter), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tvlab::analysis
