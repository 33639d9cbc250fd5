// Chapter 05, converting MHA to GQA by mean-pooling the key and value heads of each group
// (Ainslie et al. 2023, §2.1): the pooling itself, weights whose heads have a chosen cosine
// similarity rho, and the output error of the converted layer as rho goes from 0 to 1 (exact at
// rho = 1, decreasing in rho, first order in sqrt(1 - rho) near 1); then each error path.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../common/testing.hpp"
#include "tvlab/analysis/gqa_uptraining.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::ch05 {
namespace {

using analysis::MeanPoolPoint;
using analysis::UptrainingExperiment;
using tvlab::testing::throws_error_naming;

MhaWeights random_mha(Rng& rng, std::size_t d_model, std::size_t heads, std::size_t d_k) {
  return {rng.normal_matrix(d_model, heads * d_k), rng.normal_matrix(d_model, heads * d_k),
          rng.normal_matrix(d_model, heads * d_k), rng.normal_matrix(heads * d_k, d_model)};
}

// ---------------------------------------------------------------------------------- the pooling

TEST(Ch05Uptraining, pooling_with_as_many_kv_heads_as_heads_changes_nothing) {
  Rng rng(1);
  const MhaWeights mha = random_mha(rng, 7, 4, 3);
  const GqaWeights same = analysis::mean_pool_kv_heads(mha, {4, 4});
  // The mean of one number is that number, exactly.
  EXPECT_EQ(same.w_k, mha.w_k);
  EXPECT_EQ(same.w_v, mha.w_v);
  EXPECT_EQ(same.w_q, mha.w_q);
  EXPECT_EQ(same.w_o, mha.w_o);
}

TEST(Ch05Uptraining, each_group_gets_the_mean_of_its_heads_projections) {
  // Head i's key block filled with i and its value block with -2i: group j of r consecutive heads
  // gets the mean of j r, ..., j r + r - 1, which is j r + (r - 1)/2 (exact in float).
  const std::size_t d_model = 3, d_k = 2, h = 6;
  MhaWeights mha{xt::zeros<float>({d_model, h * d_k}), Tensor2::from_shape({d_model, h * d_k}),
                 Tensor2::from_shape({d_model, h * d_k}), xt::zeros<float>({h * d_k, d_model})};
  for (std::size_t c = 0; c < d_model; ++c)
    for (std::size_t col = 0; col < h * d_k; ++col) {
      mha.w_k(c, col) = static_cast<float>(col / d_k);
      mha.w_v(c, col) = -2.0f * static_cast<float>(col / d_k);
    }
  for (const int g : {1, 2, 3}) {
    const GqaWeights pooled = analysis::mean_pool_kv_heads(mha, {6, g});
    const std::size_t r = h / static_cast<std::size_t>(g);
    ASSERT_EQ(shape_of(pooled.w_k), (std::vector<std::size_t>{d_model, static_cast<std::size_t>(g) * d_k}));
    for (std::size_t j = 0; j < static_cast<std::size_t>(g); ++j) {
      const double mean = static_cast<double>(j * r) + (static_cast<double>(r) - 1.0) / 2.0;
      for (std::size_t c = 0; c < d_model; ++c)
        for (std::size_t d = 0; d < d_k; ++d) {
          EXPECT_EQ(pooled.w_k(c, j * d_k + d), mean) << "g " << g << ", group " << j;
          EXPECT_EQ(pooled.w_v(c, j * d_k + d), -2.0 * mean) << "g " << g << ", group " << j;
        }
    }
  }
}

// --------------------------------------------------------------------- heads of a chosen similarity

TEST(Ch05Uptraining, the_built_heads_have_cosine_similarity_close_to_rho) {
  // One pair's cosine over m = d_model d_k entries is a sample correlation of m pairs of
  // correlation rho: standard deviation about (1 - rho^2)/sqrt(m) (Fisher). The mean over pairs
  // varies less; 4 standard deviations of one pair bound it.
  const UptrainingExperiment e;
  const double m = static_cast<double>(e.d_model * e.head_dim);
  for (const double rho : {0.0, 0.3, 0.5, 0.7, 0.9, 1.0}) {
    const MhaWeights mha = analysis::mha_weights_with_similar_kv_heads(e.d_model, e.heads, e.head_dim, rho, 9);
    EXPECT_NEAR(analysis::mean_cosine_within_groups(mha, e.heads), rho, 4 * (1 - rho * rho) / std::sqrt(m) + 1e-6)
        << "rho " << rho;
  }
  // Heads of different groups share nothing: seen as one group of 8 they are barely alike.
  const MhaWeights mha = analysis::mha_weights_with_similar_kv_heads(e.d_model, {8, 2}, e.head_dim, 0.9, 9);
  const double within = analysis::mean_cosine_within_groups(mha, {8, 2});
  const double all = analysis::mean_cosine_within_groups(mha, {8, 1});
  // 12 of the 28 pairs of 8 heads lie in a group (cosine 0.9), the other 16 across (cosine 0).
  EXPECT_NEAR(all, within * 12.0 / 28.0, 4 / std::sqrt(m));
}

// ----------------------------------------------------------------------------- the error against rho

TEST(Ch05Uptraining, heads_that_are_already_equal_pool_into_exactly_the_mha_layer) {
  for (const KvHeads heads : {KvHeads{8, 2}, KvHeads{8, 1}, KvHeads{6, 3}}) {
    UptrainingExperiment e;
    e.heads = heads;
    const MeanPoolPoint p = analysis::mean_pool_error(e, {1.0}).front();
    // rho = 1: every head of a group is the shared matrix S bit for bit, and the mean of r copies
    // of a float (sum exact in double, then / r) is that float: the pooled layer is the MHA layer.
    EXPECT_EQ(p.weight_error, 0.0);
    // The two layers then add the same numbers (up to the order of the heads' loops): rounding only.
    EXPECT_LE(p.output_error, 1e-6) << "h " << heads.num_heads << ", g " << heads.num_kv_heads;
    EXPECT_NEAR(p.measured_cosine, 1.0, 1e-6);
  }
}

TEST(Ch05Uptraining, the_output_error_falls_as_the_heads_grow_alike) {
  const std::vector<double> rhos{0.0, 0.25, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0};
  for (const KvHeads heads : {KvHeads{8, 2}, KvHeads{8, 1}, KvHeads{8, 4}}) {
    UptrainingExperiment e;
    e.heads = heads;
    const std::vector<MeanPoolPoint> points = analysis::mean_pool_error(e, rhos);
    ASSERT_EQ(points.size(), rhos.size());
    const double g_over_h = static_cast<double>(heads.num_kv_heads) / heads.num_heads;
    for (std::size_t i = 0; i < points.size(); ++i) {
      const MeanPoolPoint& p = points[i];
      // By construction W_i - mean = sqrt(1 - rho) (E_i - mean E), and E|E_i - mean E|^2 =
      // (1 - g/h) E|E_i|^2 = (1 - g/h) E|W_i|^2: the relative weight error is sqrt((1 - rho)(1 - g/h)).
      // Its squared norms sum 2 d h d_k = 16384 squares, each relative std sqrt(2 / 16384) ~ 1%: 5% tolerance.
      const double expected = std::sqrt((1 - p.rho) * (1 - g_over_h));
      EXPECT_NEAR(p.weight_error, expected, 0.05 * expected + 1e-12) << "rho " << p.rho;
      if (i > 0) {
        EXPECT_LT(p.output_error, points[i - 1].output_error)
            << "h " << heads.num_heads << ", g " << heads.num_kv_heads << ": the error at rho " << p.rho
            << " is not below that at rho " << points[i - 1].rho;
      }
    }
  }
}

TEST(Ch05Uptraining, near_rho_one_the_output_error_is_first_order_in_the_square_root_of_one_minus_rho) {
  // The pooled weights differ from the original by sqrt(1 - rho) (E_i - mean E): a small
  // perturbation whose effect on the output is linear in it to first order, so the error at
  // 1 - rho = 1e-6 is a tenth of the error at 1e-4, up to a relative O(sqrt(1 - rho)) ~ 1% term.
  UptrainingExperiment e;
  const std::vector<MeanPoolPoint> p = analysis::mean_pool_error(e, {1 - 1e-4, 1 - 1e-6});
  EXPECT_NEAR(p[0].output_error / p[1].output_error, 10.0, 0.3);
}

// ------------------------------------------------------------------------------------ bad input

TEST(Ch05Uptraining, rejects_bad_input_naming_the_parameter) {
  Rng rng(4);
  const MhaWeights mha = random_mha(rng, 6, 4, 2);
  EXPECT_TRUE(throws_error_naming([&] { analysis::mean_pool_kv_heads(mha, {4, 3}); },
                                  {"mean_pool_kv_heads", "num_kv_heads (3)"}));
  EXPECT_TRUE(throws_error_naming([&] { analysis::mean_pool_kv_heads(mha, {3, 1}); }, {"w_q", "multiple of num_heads"}));
  MhaWeights narrow = mha;
  narrow.w_k = rng.normal_matrix(6, 4);
  EXPECT_TRUE(throws_error_naming([&] { analysis::mean_pool_kv_heads(narrow, {4, 2}); }, {"w_k", "columns"}));
  EXPECT_TRUE(throws_error_naming([&] { analysis::mean_cosine_within_groups(mha, {4, 4}); },
                                  {"mean_cosine_within_groups", "num_kv_heads (4)"}));
  for (const double rho : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_TRUE(throws_error_naming([&] { analysis::mha_weights_with_similar_kv_heads(8, {4, 2}, 2, rho, 1); }, {"rho"}));
  }
  EXPECT_TRUE(throws_error_naming([] { analysis::mha_weights_with_similar_kv_heads(0, {4, 2}, 2, 0.5, 1); }, {"d_model"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::mha_weights_with_similar_kv_heads(8, {4, 2}, 0, 0.5, 1); }, {"head_dim"}));
  UptrainingExperiment e;
  EXPECT_TRUE(throws_error_naming([&] { analysis::mean_pool_error(e, {0.5, 2.0}); }, {"mean_pool_error", "rhos", "2"}));
  e.heads = {8, 8};
  EXPECT_TRUE(throws_error_naming([&] { analysis::mean_pool_error(e, {0.5}); }, {"num_kv_heads (8)"}));
  e.heads = {8, 2};
  e.seq = 0;
  EXPECT_TRUE(throws_error_naming([&] { analysis::mean_pool_error(e, {0.5}); }, {"experiment.seq"}));
  const Tensor2 a = rng.normal_matrix(3, 4);
  EXPECT_TRUE(throws_error_naming([&] { analysis::relative_frobenius_error(a, rng.normal_matrix(3, 5)); },
                                  {"relative_frobenius_error", "approximation", "columns"}));
  EXPECT_TRUE(throws_error_naming([&] { analysis::relative_frobenius_error(xt::zeros<float>({3, 4}), a); },
                                  {"reference", "all zero"}));
}

}  // namespace
}  // namespace tvlab::ch05
