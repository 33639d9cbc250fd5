// Chapter 06, the low-rank dilemma: singular values by Jacobi rotations against matrices of known
// spectrum, then the rank of linear attention's weight matrix (at most the feature dimension)
// against softmax attention's (full) on the same queries and keys.

#include <gtest/gtest.h>

#include <cmath>

#include "../common/testing.hpp"
#include "tvlab/analysis/low_rank.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::analysis {
namespace {

using tvlab::testing::throws_error_naming;

// A matrix of known singular values: U diag(sigma) V^T with U and V Givens-rotated identities
// (orthogonal by construction), 5 x 4, sigma = 7, 3, 1, 0 (rank 3).
TEST(Ch06LowRank, jacobi_finds_known_singular_values) {
  const std::vector<double> sigma = {7.0, 3.0, 1.0, 0.0};
  DTensor2 u = xt::eye<double>(5), v = xt::eye<double>(4);
  // Rotations by fixed angles in the planes (0,1), (1,2), (2,3), (3,4) of U and (0,2), (1,3) of V.
  auto rotate = [](DTensor2& m, std::size_t a, std::size_t b, double angle) {
    for (std::size_t i = 0; i < m.shape()[0]; ++i) {
      const double x = m(i, a), y = m(i, b);
      m(i, a) = std::cos(angle) * x - std::sin(angle) * y;
      m(i, b) = std::sin(angle) * x + std::cos(angle) * y;
    }
  };
  rotate(u, 0, 1, 0.3), rotate(u, 1, 2, 1.1), rotate(u, 2, 3, -0.7), rotate(u, 3, 4, 2.0);
  rotate(v, 0, 2, 0.9), rotate(v, 1, 3, -1.3);
  DTensor2 a = xt::zeros<double>({5, 4});
  for (std::size_t i = 0; i < 5; ++i)
    for (std::size_t j = 0; j < 4; ++j)
      for (std::size_t r = 0; r < 4; ++r) a(i, j) += u(i, r) * sigma[r] * v(j, r);
  const std::vector<double> got = singular_values(a);
  ASSERT_EQ(got.size(), 4u);
  for (std::size_t r = 0; r < 4; ++r) EXPECT_NEAR(got[r], sigma[r], 1e-12) << "singular value " << r;
  EXPECT_EQ(numerical_rank(got), 3u);
  EXPECT_TRUE(throws_error_naming([] { singular_values(xt::zeros<double>({2, 3})); }, {"singular_values", "rows"}));
}

// phi(Q) phi(K)^T is n x m times m x n: rank <= m = d (elementwise feature maps), the rank the
// rows' normalisation (a diagonal scaling) keeps. The softmax matrix of the same q, k has full
// rank n. n = 48 positions, d = 4 and 8.
TEST(Ch06LowRank, linear_attention_weights_have_rank_at_most_d_and_softmax_is_full_rank) {
  for (const std::size_t d : {std::size_t{4}, std::size_t{8}}) {
    const LowRankReport r = low_rank_dilemma(48, d, FeatureMap::elu_plus_one, 606);
    EXPECT_EQ(r.linear.rank, d) << "elu+1 features of width d = " << d;
    EXPECT_EQ(r.softmax.rank, 48u) << "softmax, d = " << d;
    // rows are distributions: entropy in (0, ln n]
    EXPECT_GT(r.linear.mean_row_entropy, 0.0);
    EXPECT_LE(r.linear.mean_row_entropy, std::log(48.0) + 1e-12);
    EXPECT_LE(r.softmax.mean_row_entropy, std::log(48.0) + 1e-12);
  }
  EXPECT_TRUE(throws_error_naming([] { low_rank_dilemma(0, 4, FeatureMap::elu_plus_one, 1); }, {"low_rank_dilemma", "n"}));
}

}  // namespace
}  // namespace tvlab::analysis
