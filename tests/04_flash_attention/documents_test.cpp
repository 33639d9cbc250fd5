// Chapter 04: the online softmax's state algebra (update and merge), checked on the reference.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "../common/testing.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/online_softmax.hpp"

namespace tvlab::ch04 {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// m and l of a whole row in one pass, in double: the definition.
ref::SoftmaxState direct(const std::vector<float>& x) {
  double m = -std::numeric_limits<double>::infinity(), l = 0;
  for (float v : x) m = std::max(m, static_cast<double>(v));
  if (m == -std::numeric_limits<double>::infinity()) return {};
  for (float v : x) l += std::exp(static_cast<double>(v) - m);
  return {m, l};
}

TEST(Ch04OnlineSoftmax, merging_the_states_of_any_split_gives_the_state_of_the_whole) {
  Rng rng(4);
  std::vector<float> x(50);
  for (auto& v : x) v = static_cast<float>(rng.normal() * 4);
  x[31] = 25.0f;  // the maximum sits in the right part for most splits
  x[7] = kNegInf;
  const ref::SoftmaxState whole = direct(x);
  for (std::size_t split = 0; split <= x.size(); ++split) {
    const std::span<const float> left(x.data(), split), right(x.data() + split, x.size() - split);
    const ref::SoftmaxState a = ref::online_softmax_update({}, left), b = ref::online_softmax_update({}, right);
    for (const ref::SoftmaxState merged : {ref::online_softmax_merge(a, b), ref::online_softmax_merge(b, a)}) {
      EXPECT_EQ(merged.max, whole.max) << "split " << split;
      EXPECT_NEAR(merged.sum, whole.sum, 1e-14 * whole.sum) << "split " << split;
    }
    // Streaming the right part into the left part's state is the same as merging.
    const ref::SoftmaxState streamed = ref::online_softmax_update(a, right);
    EXPECT_EQ(streamed.max, whole.max);
    EXPECT_NEAR(streamed.sum, whole.sum, 1e-14 * whole.sum) << "split " << split;
  }
}

TEST(Ch04OnlineSoftmax, the_empty_state_and_masked_blocks_change_nothing) {
  const std::vector<float> x = {0.5f, -1.0f, 3.0f};
  const ref::SoftmaxState s = ref::online_softmax_update({}, x);
  const ref::SoftmaxState with_empty = ref::online_softmax_merge(s, {});
  EXPECT_EQ(with_empty.max, s.max);
  EXPECT_EQ(with_empty.sum, s.sum);
  const std::vector<float> masked = {kNegInf, kNegInf};
  const ref::SoftmaxState after_masked = ref::online_softmax_update(s, masked);
  EXPECT_EQ(after_masked.max, s.max);
  EXPECT_EQ(after_masked.sum, s.sum);
  // Only masked logits so far: still the empty state, no NaN from (-inf) - (-inf).
  const ref::SoftmaxState nothing = ref::online_softmax_update({}, masked);
  EXPECT_EQ(nothing.sum, 0.0);
  const ref::SoftmaxState later = ref::online_softmax_update(nothing, x);
  EXPECT_EQ(later.max, s.max);
  EXPECT_NEAR(later.sum, s.sum, 1e-15);
  const std::vector<float> bad = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_TRUE(tvlab::testing::throws_error_naming([&] { ref::online_softmax_update({}, bad); },
                                                  {"online_softmax_update", "block"}));
}

}  // namespace
}  // namespace tvlab::ch04
