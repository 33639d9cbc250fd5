// Chapter 08, pruning: magnitude pruning removes exactly the smallest weights; 2:4 keeps the two
// largest of every four, stores half, and its product touching only the kept values equals the
// dense product of the pruned matrix; a head's importance is exactly the output change when it
// alone is masked, and removing the least important heads first costs least.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../common/testing.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/pruning.hpp"

namespace tvlab::ref {
namespace {

using tvlab::testing::throws_error_naming;

TEST(Ch08Pruning, magnitude_pruning_removes_the_smallest_weights) {
  Rng rng(840);
  const Tensor2 w = rng.normal_matrix(7, 13);
  for (double s : {0.0, 0.3, 0.5, 0.9, 1.0}) {
    const Tensor2 p = magnitude_prune(w, s);
    const auto removed = static_cast<std::size_t>(std::llround(s * 91));
    std::size_t zeros = 0;
    float largest_removed = 0.0f, smallest_kept = INFINITY;
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (p.data()[i] == 0.0f) {
        ++zeros;
        largest_removed = std::max(largest_removed, std::fabs(w.data()[i]));
      } else {
        EXPECT_EQ(p.data()[i], w.data()[i]) << "a kept weight changed";
        smallest_kept = std::min(smallest_kept, std::fabs(w.data()[i]));
      }
    }
    EXPECT_EQ(zeros, removed) << "sparsity " << s;
    if (zeros > 0 && zeros < w.size()) {
      EXPECT_LE(largest_removed, smallest_kept) << "sparsity " << s;
    }
  }
}

TEST(Ch08Pruning, two_of_every_four_and_the_product_that_skips_the_zeros) {
  Rng rng(841);
  const Tensor2 w = rng.normal_matrix(9, 24);
  const Sparse24 s = prune_2_4(w);
  EXPECT_EQ(s.values.size(), 9u * 12u) << "exactly half the weights are stored";
  const Tensor2 dense = densify(s);
  for (std::size_t r = 0; r < 9; ++r)
    for (std::size_t g = 0; g < 6; ++g) {
      std::vector<float> mags;
      int kept = 0;
      for (std::size_t p = 0; p < 4; ++p) {
        mags.push_back(std::fabs(w(r, 4 * g + p)));
        if (dense(r, 4 * g + p) != 0.0f) {
          ++kept;
          EXPECT_EQ(dense(r, 4 * g + p), w(r, 4 * g + p));
        }
      }
      EXPECT_EQ(kept, 2);
      std::sort(mags.begin(), mags.end());
      for (std::size_t p = 0; p < 4; ++p)  // the kept ones are the two largest
        if (dense(r, 4 * g + p) != 0.0f) {
          EXPECT_GE(std::fabs(w(r, 4 * g + p)), mags[2]);
        }
    }
  // the sparse product sums the same nonzero terms in the same order as the dense one, in double
  const Tensor2 xm = rng.normal_matrix(1, 24);
  Tensor1 x = Tensor1::from_shape({24});
  std::copy(xm.begin(), xm.end(), x.begin());
  const Tensor1 y = sparse_2_4_gemv(s, x);
  for (std::size_t r = 0; r < 9; ++r) {
    double expected = 0.0;
    for (std::size_t c = 0; c < 24; ++c) expected += double(dense(r, c)) * x(c);
    EXPECT_EQ(y(r), static_cast<float>(expected)) << "row " << r;
  }
}

// Ties go to the lower position: a group of equal magnitudes keeps positions 0 and 1.
TEST(Ch08Pruning, ties_keep_the_lower_positions) {
  const Tensor2 w = {{1.0f, -1.0f, 1.0f, -1.0f, 0.5f, 2.0f, 2.0f, 0.5f}};
  const Sparse24 s = prune_2_4(w);
  EXPECT_EQ(s.positions, (std::vector<std::uint8_t>{0, 1, 1, 2}));
}

// Four heads of very different sizes: each importance equals the relative change of the output
// when that head is masked (recomputed here by masking), and masking the least important first
// changes the output least.
TEST(Ch08Pruning, head_importance_is_the_change_when_masked) {
  Rng rng(842);
  Tensor3 heads = Tensor3::from_shape({4, 10, 3});
  const double size[4] = {1.0, 0.05, 0.5, 0.01};
  for (std::size_t h = 0; h < 4; ++h)
    for (std::size_t i = 0; i < 10; ++i)
      for (std::size_t c = 0; c < 3; ++c) heads(h, i, c) = static_cast<float>(size[h] * rng.normal());
  const Tensor2 w_o = rng.normal_matrix(12, 5);
  const std::vector<double> importance = head_importance(heads, w_o);
  const Tensor2 full = masked_head_output(heads, w_o, {true, true, true, true});
  double full_sq = 0.0;
  for (float v : full) full_sq += double(v) * v;
  for (std::size_t h = 0; h < 4; ++h) {
    std::vector<bool> keep(4, true);
    keep[h] = false;
    const Tensor2 masked = masked_head_output(heads, w_o, keep);
    double change_sq = 0.0;
    for (std::size_t i = 0; i < full.size(); ++i) change_sq += std::pow(double(full.data()[i]) - masked.data()[i], 2);
    EXPECT_NEAR(importance[h], std::sqrt(change_sq / full_sq), 1e-6) << "head " << h;
  }
  EXPECT_LT(importance[3], importance[1]);
  EXPECT_LT(importance[1], importance[2]);
  EXPECT_LT(importance[2], importance[0]);
}

TEST(Ch08Pruning, bad_input_is_named) {
  Rng rng(843);
  const Tensor2 w = rng.normal_matrix(2, 6);
  EXPECT_TRUE(throws_error_naming([&] { magnitude_prune(w, 1.5); }, {"magnitude_prune", "sparsity (1.5)"}));
  EXPECT_TRUE(throws_error_naming([&] { prune_2_4(w); }, {"prune_2_4", "row length (6)", "multiple of 4"}));
  Tensor2 bad = rng.normal_matrix(2, 8);
  bad(1, 1) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { prune_2_4(bad); }, {"prune_2_4", "w"}));
  const Sparse24 s = prune_2_4(rng.normal_matrix(2, 8));
  EXPECT_TRUE(throws_error_naming([&] { sparse_2_4_gemv(s, Tensor1::from_shape({4})); }, {"sparse_2_4_gemv", "x has 4"}));
  const Tensor3 heads = xt::zeros<float>({std::size_t{2}, std::size_t{3}, std::size_t{2}});
  EXPECT_TRUE(throws_error_naming([&] { head_importance(heads, rng.normal_matrix(5, 3)); }, {"head_importance", "w_o has 5 rows"}));
  EXPECT_TRUE(throws_error_naming([&] { head_importance(heads, rng.normal_matrix(4, 3)); }, {"head_importance", "all zero"}));
}

}  // namespace
}  // namespace tvlab::ref
