// Chapter 05, one decode step over a KV cache: every optimized version (threads over query heads;
// split-K flash-decoding over (kv head, split)) equals the double-precision reference for MHA,
// GQA and MQA, reads no position past `length`, and merges its splits into the unsplit softmax.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../common/testing.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/opt/gqa_decode.hpp"
#include "tvlab/ref/gqa_decode.hpp"

namespace tvlab::opt {
namespace {

using tvlab::testing::matches;
using tvlab::testing::throws_error_naming;

using DecodeFn = std::function<GqaDecodeOutput(const Tensor2&, const Tensor3&, const Tensor3&, std::size_t)>;
struct Version {
  const char* name;
  DecodeFn fn;
};
const std::vector<Version>& versions() {
  static const std::vector<Version> all{
      {"v1", [](const Tensor2& q, const Tensor3& k, const Tensor3& v, std::size_t n) { return gqa_decode_attention_v1(q, k, v, n); }},
      {"v2", [](const Tensor2& q, const Tensor3& k, const Tensor3& v, std::size_t n) { return gqa_decode_attention_v2(q, k, v, n); }},
      {"v2, 3 splits",
       [](const Tensor2& q, const Tensor3& k, const Tensor3& v, std::size_t n) {
         return gqa_decode_attention_v2(q, k, v, n, std::nullopt, std::min<std::size_t>(3, n));
       }},
      {"gqa_decode_attention",
       [](const Tensor2& q, const Tensor3& k, const Tensor3& v, std::size_t n) { return gqa_decode_attention(q, k, v, n); }},
  };
  return all;
}

struct DecodeCase {
  std::size_t heads, kv_heads, d, d_v, length, capacity;
};

std::string label_of(const DecodeCase& c) {
  return "h " + std::to_string(c.heads) + ", g " + std::to_string(c.kv_heads) + ", d " + std::to_string(c.d) +
         ", d_v " + std::to_string(c.d_v) + ", length " + std::to_string(c.length) + " of " + std::to_string(c.capacity);
}

// A cache of `capacity` positions whose first `length` are random and the rest NaN: a version that
// reads past `length` returns NaN somewhere.
struct Cache {
  Tensor2 q;
  Tensor3 k, v;
};
Cache make_cache(const DecodeCase& c, unsigned long long seed) {
  Rng rng(seed);
  Cache cache{rng.normal_matrix(c.heads, c.d, 0.0, 2.0), rng.normal_tensor(c.kv_heads, c.capacity, c.d),
              rng.normal_tensor(c.kv_heads, c.capacity, c.d_v)};
  constexpr float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::size_t g = 0; g < c.kv_heads; ++g)
    for (std::size_t j = c.length; j < c.capacity; ++j) {
      for (std::size_t e = 0; e < c.d; ++e) cache.k(g, j, e) = nan;
      for (std::size_t e = 0; e < c.d_v; ++e) cache.v(g, j, e) = nan;
    }
  return cache;
}

// Largest Euclidean norm of a row of x [rows, dim] (or of the first `length` positions of a cache).
double max_row_norm(const float* x, std::size_t rows, std::size_t dim) {
  double best = 0.0;
  for (std::size_t r = 0; r < rows; ++r) {
    double sum = 0.0;
    for (std::size_t e = 0; e < dim; ++e) sum += static_cast<double>(x[r * dim + e]) * x[r * dim + e];
    best = std::max(best, std::sqrt(sum));
  }
  return best;
}

// The float tolerances of an attention over `length` keys against the double oracle.
// out: rtol = 2 reduction_rtol(max(d, length)) (10 eps sqrt(K) for the float dot products and the
// weighted sum, doubled for the reference's own rounding to float), atol = attention_tolerance:
// rtol max|v| (2M + 1), where M bounds |score| by Cauchy-Schwarz, M <= scale max|q_i|_2 max|k_j|_2.
// lse = m + ln l: a score error delta <= rtol M moves m and ln l by at most delta each, and ln l's
// own float rounding is within rtol, so atol = rtol (2M + 1) as well, relative to |lse|.
struct DecodeTolerance {
  Tolerance out, lse;
};
DecodeTolerance tolerance_of(const DecodeCase& c, const Cache& cache) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  double k_norm = 0.0, v_max = 0.0;
  for (std::size_t g = 0; g < c.kv_heads; ++g) {
    k_norm = std::max(k_norm, max_row_norm(cache.k.data() + g * c.capacity * c.d, c.length, c.d));
    for (std::size_t j = 0; j < c.length; ++j)
      for (std::size_t e = 0; e < c.d_v; ++e) v_max = std::max(v_max, static_cast<double>(std::fabs(cache.v(g, j, e))));
  }
  const double m = scale * max_row_norm(cache.q.data(), c.heads, c.d) * k_norm;
  const double rtol = 2 * reduction_rtol(std::max(c.d, c.length));
  return {{attention_tolerance(c.d, c.length, m, v_max), rtol}, {rtol * (2 * m + 1), rtol}};
}

const std::vector<DecodeCase>& cases() {
  static const std::vector<DecodeCase> all{
      // MHA (g = h), GQA (h = 32, g = 8), MQA (g = 1) at the model's head size, positions past
      // `length` NaN: lengths 1, 7, 1001 (no multiple of a split or of a 128-position block), 3000.
      {4, 4, 128, 128, 1, 3},       {4, 4, 128, 128, 7, 9},       {4, 4, 128, 128, 1001, 1010},
      {32, 8, 128, 128, 1, 2},      {32, 8, 128, 128, 7, 7},      {32, 8, 128, 128, 1001, 1024},
      {32, 8, 128, 128, 3000, 3001}, {8, 1, 128, 128, 1, 4},      {8, 1, 128, 128, 7, 16},
      {8, 1, 128, 128, 1001, 1002}, {8, 1, 128, 128, 3000, 3000},
      // A small odd head size with d_v != d: the SIMD loops' tails and the padding of the values.
      {6, 2, 5, 3, 1, 2},           {6, 2, 5, 3, 7, 11},          {6, 2, 5, 3, 1001, 1003},
      {6, 6, 5, 9, 3000, 3005},     {6, 1, 5, 9, 300, 301},
      // 16 or more query heads per kv head: v2's scores on the register-blocked micro-kernel.
      {32, 1, 128, 128, 7, 8},      {32, 1, 128, 128, 1001, 1003}, {16, 1, 5, 3, 300, 302},
  };
  return all;
}

TEST(GqaDecode, every_version_equals_the_double_oracle_for_mha_gqa_and_mqa) {
  unsigned long long seed = 500;
  for (const DecodeCase& c : cases()) {
    ++seed;
    const Cache cache = make_cache(c, seed);
    const auto expected = ref::gqa_decode_attention(cache.q, cache.k, cache.v, c.length);
    const DecodeTolerance tol = tolerance_of(c, cache);
    for (const Version& version : versions()) {
      const std::string what = std::string(version.name) + ", " + label_of(c);
      const GqaDecodeOutput got = version.fn(cache.q, cache.k, cache.v, c.length);
      EXPECT_TRUE(matches(got.out, xt::eval(xt::cast<double>(expected.out)), tol.out,
                          {what + ": out", {"h", "e"}, seed, "",
                           "query head i reads kv head i / (h/g) and only its first `length` positions (the rest are "
                           "NaN): o_i = sum_j softmax(scale q_i . k_j) v_j"}));
      EXPECT_TRUE(matches(got.lse, xt::eval(xt::cast<double>(expected.lse)), tol.lse,
                          {what + ": lse", {"h"}, seed, "", "L_i = m_i + ln sum_j e^{s_ij - m_i} over the cached positions"}));
    }
  }
}

// Chapter 04's merge is exact algebra: e^{m_s - m} rescales each split's (l_s, O~_s) to the common
// maximum. So any number of splits gives the unsplit result up to float rounding only: the sums
// over positions are regrouped, which moves a float sum of K terms by at most reduction_rtol(K)
// relative to the sum of |terms| (atol reduction_rtol(K) max|v| for the output, whose weights sum
// to 1; reduction_rtol(K) (|lse| + 1) for the lse).
TEST(GqaDecode, merging_the_splits_equals_the_unsplit_softmax_up_to_rounding) {
  const DecodeCase c{32, 8, 128, 128, 3000, 3000};
  const Cache cache = make_cache(c, 77);
  const GqaDecodeOutput unsplit = gqa_decode_attention_v2(cache.q, cache.k, cache.v, c.length, std::nullopt, 1);
  const double rtol = reduction_rtol(c.length);
  const double v_max = xt::amax(xt::abs(cache.v))();
  for (std::size_t splits : {2u, 3u, 7u, 16u, 100u, 3000u}) {
    const GqaDecodeOutput split = gqa_decode_attention_v2(cache.q, cache.k, cache.v, c.length, std::nullopt, splits);
    const std::string what = "v2 with " + std::to_string(splits) + " splits against 1 split";
    EXPECT_TRUE(matches(split.out, xt::eval(xt::cast<double>(unsplit.out)), {rtol * v_max, rtol},
                        {what + ": out", {"h", "e"}, 77, "", "o = sum_s e^{m_s - m} O~_s / sum_s e^{m_s - m} l_s"}));
    EXPECT_TRUE(matches(split.lse, xt::eval(xt::cast<double>(unsplit.lse)), {rtol, rtol},
                        {what + ": lse", {"h"}, 77, "", "L = m + ln sum_s e^{m_s - m} l_s"}));
  }
}

// With 2 threads, every model shape must leave no thread idle: at least 2 work items (kv head,
// split), and no more splits than positions.
TEST(GqaDecode, the_split_count_keeps_two_threads_busy_for_one_eight_and_thirty_two_kv_heads) {
  for (std::size_t g : {1u, 8u, 32u})
    for (std::size_t length : {1u, 300u, 1024u, 32768u, 131072u}) {
      const std::size_t splits = gqa_decode_splits(length, g, 2);
      EXPECT_GE(splits, 1u) << "g " << g << ", length " << length;
      EXPECT_LE(splits, length) << "g " << g << ", length " << length;
      if (length >= 1024) {
        EXPECT_GE(g * splits, 2u) << "g " << g << ", length " << length << ": " << splits << " splits";
      }
    }
  EXPECT_GE(gqa_decode_splits(32768, 1, 2), 8u) << "MQA: one kv head, its positions shared by the threads";
}

TEST(GqaDecode, bad_input_is_an_error_naming_the_parameter) {
  const DecodeCase c{8, 2, 5, 3, 4, 6};
  const Cache cache = make_cache(c, 9);
  Rng rng(10);
  const Tensor2 q_odd_heads = rng.normal_matrix(7, c.d);
  const Tensor3 k_wrong_dim = rng.normal_tensor(c.kv_heads, c.capacity, c.d + 1);
  const Tensor3 v_wrong_capacity = rng.normal_tensor(c.kv_heads, c.capacity + 1, c.d_v);
  const Tensor3 v_wrong_heads = rng.normal_tensor(c.kv_heads + 1, c.capacity, c.d_v);
  Tensor2 q_nan = cache.q;
  q_nan(3, 1) = std::numeric_limits<float>::quiet_NaN();
  std::vector<Version> all = versions();
  all.push_back({"reference", [](const Tensor2& q, const Tensor3& k, const Tensor3& v, std::size_t n) {
                   return ref::gqa_decode_attention(q, k, v, n);
                 }});
  for (const Version& version : all) {
    const DecodeFn& f = version.fn;
    EXPECT_TRUE(throws_error_naming([&] { f(q_odd_heads, cache.k, cache.v, c.length); }, {"gqa_decode_attention", "num_heads (7", "num_kv_heads (2"}))
        << version.name << ": 7 query heads cannot be shared by 2 kv heads";
    EXPECT_TRUE(throws_error_naming([&] { f(cache.q, cache.k, cache.v, 0); }, {"length (0)"})) << version.name;
    EXPECT_TRUE(throws_error_naming([&] { f(cache.q, cache.k, cache.v, c.capacity + 1); }, {"length (7)", "capacity = 6"}))
        << version.name;
    EXPECT_TRUE(throws_error_naming([&] { f(cache.q, k_wrong_dim, cache.v, c.length); }, {"k_cache", "head_dim 6"}))
        << version.name;
    EXPECT_TRUE(throws_error_naming([&] { f(cache.q, cache.k, v_wrong_capacity, c.length); }, {"v_cache", "capacity 7"}))
        << version.name;
    EXPECT_TRUE(throws_error_naming([&] { f(cache.q, cache.k, v_wrong_heads, c.length); }, {"v_cache", "kv heads 3"}))
        << version.name;
    EXPECT_TRUE(throws_error_naming([&] { f(q_nan, cache.k, cache.v, c.length); }, {"q", "non-finite"})) << version.name;
  }
  EXPECT_TRUE(throws_error_naming(
      [&] { gqa_decode_attention_v2(cache.q, cache.k, cache.v, c.length, std::nullopt, c.length + 1); }, {"splits (5)"}));
  EXPECT_TRUE(throws_error_naming([&] { gqa_decode_attention_v1(cache.q, cache.k, cache.v, c.length, -1.0); }, {"scale"}));
}

}  // namespace
}  // namespace tvlab::opt
