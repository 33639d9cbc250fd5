// Chapter 03's suites over every backend of its registry: the sliding-window attention and the
// block-sparse attention against chapter 00's double-precision oracle with the same mask.

#include <gtest/gtest.h>

#include "../common/attention_oracle.hpp"
#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "tvlab/core/attention_patterns.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::sparse {
namespace {

using tvlab::testing::matches;
using tvlab::testing::reduction_rtol;

struct WindowCase {
  const char* label;
  std::size_t heads, seq_q, seq_k, head_dim;
  long long left, right;
};
void PrintTo(const WindowCase& c, std::ostream* out) { *out << c.label; }

class SlidingWindowCases : public ::testing::TestWithParam<std::tuple<Backend, WindowCase>> {};

// o_i = softmax over the keys i' - w_l <= j <= i' + w_r of scale q_i . k_j, times v: chapter 00's
// attention with the same window (its oracle computes in double).
TEST_P(SlidingWindowCases, matches_the_masked_oracle) {
  const auto& [backend, c] = GetParam();
  TVLAB_EXERCISE(backend, "03.3");
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const unsigned long long seed = 300 + c.seq_q * 7 + c.seq_k + static_cast<unsigned long long>(c.left);
  Rng rng(seed);
  const Tensor3 q = rng.normal_tensor(c.heads, c.seq_q, c.head_dim), k = rng.normal_tensor(c.heads, c.seq_k, c.head_dim),
                v = rng.normal_tensor(c.heads, c.seq_k, c.head_dim);
  const SlidingWindow window{c.left, c.right};
  AttentionConfig cfg;
  cfg.mask.window = window;
  const DTensor3 expected = tvlab::testing::sdpa_oracle(q, k, v, cfg);
  // A weighted sum of at most seq_k values after a dot product of length head_dim, in float.
  const Tolerance tol{1e-5, reduction_rtol(c.seq_k + c.head_dim)};
  EXPECT_TRUE(matches(backend.sliding_window(q, k, v, window, {}).out, expected, tol,
                      {std::string("sliding_window_attention, ") + c.label, {"h", "i", "c"}, seed,
                       std::string("tvlab ") + TVLAB_CHAPTER_NAME + " --step --backend " + backend.name,
                       "$o_i = \\sum_{j \\in S_i} \\mathrm{softmax}_j(s_{ij})\\, v_j$ over "
                       "$S_i = [i' - w_l, i' + w_r] \\cap [0, n_k)$, $i' = i + n_k - n_q$"}));
}

const WindowCase kWindowCases[] = {
    {"seq 1, window 0", 1, 1, 1, 4, 0, 0},
    {"seq 37, radius 3", 2, 37, 37, 8, 3, 3},
    {"seq 130, causal window of 17", 2, 130, 130, 16, 16, 0},
    {"seq 65, window wider than the sequence", 1, 65, 65, 8, 100, 100},
    {"decode-like, 5 queries over 70 keys", 2, 5, 70, 8, 9, 0},
};
INSTANTIATE_TEST_SUITE_P(Ch03, SlidingWindowCases,
                         ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::sliding_window)),
                                            ::testing::ValuesIn(kWindowCases)),
                         tvlab::testing::ImplCaseName());

}  // namespace
}  // namespace tvlab::sparse
