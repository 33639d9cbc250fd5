// Chapter 06's document numbers, computed from their inputs (000 L93-L99): one query, three keys,
// scale 1. The softmax weights are e^{s_j} / sum_l e^{s_l} of the scores s_j = q . k_j; the ReLU
// kernel's scores are max(0, q) . max(0, k_j). The reference's linear attention, with value j the
// unit vector e_j, returns the kernel's weights themselves.

#include <gtest/gtest.h>

#include <cmath>

#include "backends.hpp"

namespace tvlab::linear {
namespace {

struct Example {
  Tensor3 q, k, v;
};
// q [1, 1, 3], three keys [1, 3, 3], values e_1, e_2, e_3.
Example example(std::initializer_list<float> q, std::initializer_list<std::initializer_list<float>> keys) {
  Example ex{Tensor3::from_shape({1, 1, 3}), Tensor3::from_shape({1, 3, 3}), xt::zeros<float>({std::size_t{1}, std::size_t{3}, std::size_t{3}})};
  std::size_t c = 0;
  for (float x : q) ex.q(0, 0, c++) = x;
  std::size_t j = 0;
  for (const auto& key : keys) {
    c = 0;
    for (float x : key) ex.k(0, j, c++) = x;
    ex.v(0, j, j) = 1.0f;
    ++j;
  }
  return ex;
}

Tensor3 relu_scores(const Example& ex, bool normalize) {
  LinearAttentionConfig cfg;
  cfg.feature_map = FeatureMap::relu;
  cfg.normalize = normalize;
  return reference_backend(backends()).linear_attention(ex.q, ex.k, ex.v, cfg);
}

// 000 L93-L97: q = [1, 2, 1]; k = [2, 1, 0], [1, 1, 2], [0, 1, 1]. Scores 4, 5, 3: softmax weights
// e^{-1}, 1, e^{-2} over their sum, 0.2447, 0.6652, 0.0900. The document gives 0.090, 0.665, 0.245
// for k1, k2, k3 and the ranking k2 > k3 > k1: k1's and k3's weights are swapped (errata); the
// ranking is k2 > k1 > k3.
TEST(Ch06Documents, first_example_softmax_weights_and_relu_scores) {
  const Example ex = example({1, 2, 1}, {{2, 1, 0}, {1, 1, 2}, {0, 1, 1}});
  const double sum = std::exp(-1.0) + 1.0 + std::exp(-2.0);
  const double p1 = std::exp(-1.0) / sum, p2 = 1.0 / sum, p3 = std::exp(-2.0) / sum;
  EXPECT_NEAR(p1, 0.2447, 1e-4);
  EXPECT_NEAR(p3, 0.0900, 1e-4);
  EXPECT_GT(p2, p1);
  EXPECT_GT(p1, p3);  // k2 > k1 > k3, not the document's k2 > k3 > k1
  // Every coordinate is non-negative, so ReLU changes nothing: the kernel's scores are q . k_j.
  const Tensor3 scores = relu_scores(ex, false);
  EXPECT_FLOAT_EQ(scores(0, 0, 0), 4.0f);
  EXPECT_FLOAT_EQ(scores(0, 0, 1), 5.0f);
  EXPECT_FLOAT_EQ(scores(0, 0, 2), 3.0f);
  // normalised, 4/12, 5/12, 3/12: the same ranking as softmax's
  const Tensor3 weights = relu_scores(ex, true);
  EXPECT_NEAR(weights(0, 0, 0), 4.0 / 12.0, 1e-7);
  EXPECT_NEAR(weights(0, 0, 2), 3.0 / 12.0, 1e-7);
}

// 000 L99: q = [2, -1, 3]; k = [1, 2, -1], [-2, 1, 3], [0, -1, 2]. Scores -3, 4, 7: softmax ranks
// k3 > k2 > k1. ReLU keeps [2, 0, 3] of q and [1, 2, 0], [0, 1, 3], [0, 0, 2] of the keys: scores
// 2, 9, 6, ranking k2 > k3 > k1. Truncating negative coordinates changed the order (as the
// document says).
TEST(Ch06Documents, second_example_relu_changes_the_ranking) {
  const Example ex = example({2, -1, 3}, {{1, 2, -1}, {-2, 1, 3}, {0, -1, 2}});
  const Tensor3 scores = relu_scores(ex, false);
  EXPECT_FLOAT_EQ(scores(0, 0, 0), 2.0f);
  EXPECT_FLOAT_EQ(scores(0, 0, 1), 9.0f);
  EXPECT_FLOAT_EQ(scores(0, 0, 2), 6.0f);
  // softmax: s = -3, 4, 7, so k3 > k2 > k1
  const double s1 = 2 * 1 - 1 * 2 + 3 * -1, s2 = 2 * -2 - 1 * 1 + 3 * 3, s3 = 2 * 0 - 1 * -1 + 3 * 2;
  EXPECT_EQ(s1, -3.0);
  EXPECT_EQ(s2, 4.0);
  EXPECT_EQ(s3, 7.0);
}

}  // namespace
}  // namespace tvlab::linear
