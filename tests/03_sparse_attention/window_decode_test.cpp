// Chapter 03, decoding with a sliding window: the rolling KV cache (Mistral's ring buffer of w
// slots) gives, token by token and past many wraps of its buffer, the outputs of full-sequence
// causal window attention, in memory that does not grow with the number of tokens.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "../common/testing.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/opt/window_kv_cache.hpp"
#include "tvlab/ref/sparse_attention.hpp"

namespace tvlab::opt {
namespace {

using tvlab::testing::throws_error_naming;

// Column t of x [heads, seq, dim]: the position's vectors of every head, [heads, dim].
Tensor2 position(const Tensor3& x, std::size_t t) { return xt::view(x, xt::all(), t, xt::all()); }

struct DecodeCase {
  std::size_t heads, head_dim, head_dim_v, window, tokens;
};

// Appends positions 0 .. T-1 one at a time and attends with each position's query: row t must equal
// row t of the reference's attention over the whole sequence with the causal window {w - 1, 0}
// (query t sees keys t - w + 1 .. t), computed in double. Both compute the same softmax over the
// same w keys, in a different order and precision: the float tolerance of an attention over w keys,
// rtol = reduction_rtol(max(d, w)) (10 eps sqrt(K)) and atol = rtol max|v| (2M + 1) with M the
// largest sum of |terms| of a score (attention_tolerance), plus the reference's final rounding to
// float (within rtol).
TEST(WindowKvCache, decoding_token_by_token_equals_full_sequence_window_attention) {
  for (const DecodeCase& c : {DecodeCase{2, 8, 6, 5, 23}, DecodeCase{3, 16, 16, 16, 70}, DecodeCase{1, 4, 4, 1, 9},
                              DecodeCase{2, 8, 8, 40, 25}}) {
    const std::string label = "heads " + std::to_string(c.heads) + ", head_dim " + std::to_string(c.head_dim) +
                              ", window " + std::to_string(c.window) + ", " + std::to_string(c.tokens) + " tokens";
    const unsigned long long seed = 60 + c.window;
    Rng rng(seed);
    const Tensor3 q = rng.normal_tensor(c.heads, c.tokens, c.head_dim, 0.0, 2.0);
    const Tensor3 k = rng.normal_tensor(c.heads, c.tokens, c.head_dim), v = rng.normal_tensor(c.heads, c.tokens, c.head_dim_v);
    const Tensor3 expected =
        ref::sliding_window_attention(q, k, v, {static_cast<long long>(c.window) - 1, 0}).out;
    // M <= scale max_t |q_t|_2 max_j |k_j|_2 (Cauchy-Schwarz).
    const double scale = 1 / std::sqrt(static_cast<double>(c.head_dim));
    double q_norm = 0, k_norm = 0;
    for (std::size_t h = 0; h < c.heads; ++h)
      for (std::size_t t = 0; t < c.tokens; ++t) {
        double qq = 0, kk = 0;
        for (std::size_t e = 0; e < c.head_dim; ++e) {
          qq += static_cast<double>(q(h, t, e)) * q(h, t, e);
          kk += static_cast<double>(k(h, t, e)) * k(h, t, e);
        }
        q_norm = std::max(q_norm, std::sqrt(qq));
        k_norm = std::max(k_norm, std::sqrt(kk));
      }
    const double rtol = reduction_rtol(std::max(c.head_dim, c.window));
    const Tolerance tol{attention_tolerance(c.head_dim, c.window, scale * q_norm * k_norm, xt::amax(xt::abs(v))()),
                        2 * rtol};

    WindowKvCache cache(c.heads, c.head_dim, c.head_dim_v, static_cast<long long>(c.window));
    for (std::size_t t = 0; t < c.tokens; ++t) {
      cache.append(position(k, t), position(v, t));
      const Tensor2 want = position(expected, t);
      EXPECT_TRUE(tvlab::testing::matches(
          cache.attend(position(q, t)), xt::eval(xt::cast<double>(want)), tol,
          {"WindowKvCache::attend at position " + std::to_string(t) + " (wrap " + std::to_string(t / c.window) +
               " of the buffer), " + label,
           {"h", "c"}, seed, "",
           "position t is stored in slot t mod w and the query at t sees positions t - w + 1 .. t, exactly the w "
           "slots held once t >= w - 1; before that only the t + 1 slots written so far"}));
      EXPECT_EQ(cache.size(), std::min(t + 1, c.window)) << label << ": after " << t + 1 << " tokens the cache holds "
                                                         << "min(tokens, w) positions";
    }
    EXPECT_EQ(cache.tokens(), c.tokens) << label;
  }
}

// The window is the cache's only size: 4 h w (d + d_v) + 8 w bytes from the start, whether 1 or 10 w
// tokens have been appended.
TEST(WindowKvCache, memory_is_constant_in_the_number_of_tokens) {
  const std::size_t heads = 4, d = 16, d_v = 8, w = 32;
  WindowKvCache cache(heads, d, d_v, static_cast<long long>(w));
  const std::size_t expected = heads * w * (d + d_v) * sizeof(float) + w * sizeof(double);
  EXPECT_EQ(cache.bytes(), expected) << "an empty cache of window " << w << " already holds its w slots: 4 h w (d + d_v) bytes and one double per slot";
  Rng rng(5);
  const Tensor2 k = rng.normal_matrix(heads, d), v = rng.normal_matrix(heads, d_v);
  for (std::size_t t = 1; t <= 10 * w; ++t) {
    cache.append(k, v);
    if (t == 1 || t == w || t == 10 * w) {
      EXPECT_EQ(cache.bytes(), expected) << "after " << t << " tokens: a rolling cache's memory does not grow";
    }
  }
  EXPECT_EQ(cache.size(), w);
  EXPECT_EQ(cache.tokens(), 10 * w);
}

TEST(WindowKvCache, rejects_bad_input_naming_the_parameter) {
  EXPECT_TRUE(throws_error_naming([] { WindowKvCache(2, 8, 8, 0); }, {"WindowKvCache", "window (0)"}));
  EXPECT_TRUE(throws_error_naming([] { WindowKvCache(2, 8, 8, -3); }, {"WindowKvCache", "window (-3)"}));
  EXPECT_TRUE(throws_error_naming([] { WindowKvCache(0, 8, 8, 4); }, {"WindowKvCache", "heads"}));
  EXPECT_TRUE(throws_error_naming([] { WindowKvCache(2, 0, 8, 4); }, {"WindowKvCache", "head_dim"}));
  EXPECT_TRUE(throws_error_naming([] { WindowKvCache(2, 8, 0, 4); }, {"WindowKvCache", "head_dim_v"}));
  WindowKvCache cache(2, 8, 6, 4);
  const Tensor2 k = xt::ones<float>({2, 8}), v = xt::ones<float>({2, 6});
  EXPECT_TRUE(throws_error_naming([&] { cache.attend(k); }, {"WindowKvCache::attend", "empty", "append"}));
  EXPECT_TRUE(throws_error_naming([&] { cache.append(Tensor2(xt::ones<float>({3, 8})), v); },
                                  {"WindowKvCache::append", "k_t", "[2, 8]"}));
  EXPECT_TRUE(throws_error_naming([&] { cache.append(k, Tensor2(xt::ones<float>({2, 8}))); },
                                  {"WindowKvCache::append", "v_t", "[2, 6]"}));
  Tensor2 nan = k;
  nan(1, 3) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { cache.append(nan, v); }, {"WindowKvCache::append", "k_t"}));
  EXPECT_EQ(cache.tokens(), 0U) << "a refused append must not store anything";
  cache.append(k, v);
  EXPECT_TRUE(throws_error_naming([&] { cache.attend(Tensor2(xt::ones<float>({2, 7}))); }, {"WindowKvCache::attend", "q_t"}));
  EXPECT_TRUE(throws_error_naming([&] { cache.attend(k, -1.0); }, {"WindowKvCache::attend", "scale"}));
  // |q . k| could reach 8 x 3e37 x 1 = 2.4e38: beyond what float scores may reach.
  EXPECT_TRUE(throws_error_naming([&] { cache.attend(Tensor2(xt::ones<float>({2, 8}) * 3e37f)); },
                                  {"WindowKvCache::attend", "q_t", "too large"}));
}

}  // namespace
}  // namespace tvlab::opt
