// Chapter 05's CUDA decode step (tvlab/cuda/kv_decode.hpp) against a double-precision oracle:
// contiguous caches for MHA, GQA and MQA, paged caches through interleaved block tables, MLA's
// absorbed cache at DeepSeek's widths; lengths 1, odd, one past the 32-position tile, and long;
// head groups that are not a multiple of the 16 heads a thread block serves; from 1 split to one
// split per position. Positions past `length` hold NaN where the layout allows it, so a kernel that
// reads them fails. Every test is named cuda_* (ctest label ch05-gpu); those that run a kernel skip
// without a device, the checks of bad input (made on the host, before any device call) run anyway.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../common/testing.hpp"
#include "tvlab/core/paged_kv_cache.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/cuda/kv_decode.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "tvlab/ref/gqa_decode.hpp"
#include "tvlab/ref/mla_decode.hpp"
#include "tvlab/ref/paged_attention.hpp"

namespace tvlab::kv {
namespace {

using tvlab::testing::matches;
using tvlab::testing::throws_error_naming;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- the oracle ----

// The row of query head i, of its kv head's key at position t and of its value at t: pointers
// into the test's own tensors, so that one oracle serves the three cache layouts.
using RowOf = std::function<const float*(std::size_t, std::size_t)>;

// A decode step in double, straight from the formula, and the float tolerances of it.
struct Expected {
  DTensor2 out;  // [h, d_v]
  DTensor1 lse;  // [h]
  Tolerance out_tol, lse_tol;
};

// s_it = scale q_i . k_{g(i), t}, o_i = sum_t e^{s_it - m_i} v_{g(i), t} / l_i, L_i = m_i + ln l_i,
// m_i = max_t s_it, l_i = sum_t e^{s_it - m_i}, over t < n. `key(i, t)` and `value(i, t)` give the
// rows query head i reads.
//
// Tolerances. The kernel forms each score as a float dot product of d terms, and the softmax's sums
// over the n positions in float, split or not (a split regroups the sum, it does not lengthen it):
// rtol = reduction_rtol(max(d, n)) = 10 eps sqrt(K). A score of magnitude M carries an error of at
// most rtol M; with M bounded by Cauchy-Schwarz, scale max_i |q_i|_2 max_t |k_t|_2, the output
// moves by at most rtol max|v| (2M + 1) (`attention_tolerance`); L = m + ln l moves with the
// scores (rtol M for m and as much for ln l) and with the float sum l (rtol): rtol (2M + 1).
Expected oracle(std::size_t heads, std::size_t d, std::size_t d_v, std::size_t n, double scale, const RowOf& query,
                const RowOf& key, const RowOf& value) {
  Expected e{xt::zeros<double>({heads, d_v}), xt::zeros<double>({heads}), {}, {}};
  double q_norm = 0.0, k_norm = 0.0, v_max = 0.0;
  const auto norm = [](const float* x, std::size_t size) {
    double sum = 0.0;
    for (std::size_t c = 0; c < size; ++c) sum += static_cast<double>(x[c]) * x[c];
    return std::sqrt(sum);
  };
  std::vector<double> s(n);
  for (std::size_t i = 0; i < heads; ++i) {
    const float* q = query(i, 0);
    q_norm = std::max(q_norm, norm(q, d));
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t t = 0; t < n; ++t) {
      const float* k = key(i, t);
      k_norm = std::max(k_norm, norm(k, d));
      double dot = 0.0;
      for (std::size_t c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * k[c];
      s[t] = scale * dot;
      m = std::max(m, s[t]);
    }
    double l = 0.0;
    for (std::size_t t = 0; t < n; ++t) {
      const double p = std::exp(s[t] - m);
      const float* v = value(i, t);
      l += p;
      for (std::size_t c = 0; c < d_v; ++c) {
        e.out(i, c) += p * v[c];
        v_max = std::max(v_max, static_cast<double>(std::fabs(v[c])));
      }
    }
    for (std::size_t c = 0; c < d_v; ++c) e.out(i, c) /= l;
    e.lse(i) = m + std::log(l);
  }
  const double magnitude = scale * q_norm * k_norm;
  const double rtol = reduction_rtol(std::max(d, n));
  e.out_tol = {attention_tolerance(d, n, magnitude, v_max), rtol};
  e.lse_tol = {rtol * (2 * magnitude + 1), rtol};
  return e;
}

// Split counts every case runs with: 0 (the count the host chooses), 1 (no merge to speak of), 3
// and 7 (ranges that are no multiple of the tile), and one position per split.
std::vector<std::size_t> split_counts(std::size_t n) { return {0, 1, 3, 7, n}; }

std::string splits_label(std::size_t splits) {
  return splits == 0 ? std::string("chosen splits") : std::to_string(splits) + " splits";
}

// ---- contiguous caches: MHA, GQA, MQA ----

struct GqaCase {
  std::size_t heads, kv_heads, d, d_v, length, capacity;
};

std::string label_of(const GqaCase& c) {
  return "h " + std::to_string(c.heads) + ", g " + std::to_string(c.kv_heads) + ", d " + std::to_string(c.d) +
         ", d_v " + std::to_string(c.d_v) + ", length " + std::to_string(c.length) + " of " + std::to_string(c.capacity);
}

TEST(Ch05CudaDecode, cuda_gqa_decode_equals_the_double_oracle_for_mha_gqa_and_mqa) {
  TVLAB_SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<GqaCase> cases{
      // MHA, GQA (h = 32, g = 8), MQA at a model's head size; lengths 1, 7, 33 (one past a tile),
      // 1001 and 3000 (no multiple of a tile or of a split).
      {4, 4, 128, 128, 1, 3},    {4, 4, 128, 128, 33, 40},    {4, 4, 128, 128, 1001, 1010},
      {32, 8, 128, 128, 7, 7},   {32, 8, 128, 128, 3000, 3001}, {8, 1, 128, 128, 1, 4},
      {8, 1, 128, 128, 1001, 1002},
      // Small odd head sizes, d_v below and above d: the staging loops' ends, the key tile's pitch.
      {6, 2, 5, 3, 1, 2},        {6, 2, 5, 3, 31, 33},        {6, 6, 5, 9, 3000, 3005},
      {6, 1, 5, 9, 300, 301},
      // Groups of 20 (16 + 4), 17 (16 + 1) and 128 (8 chunks of 16) heads per kv head; head_dim 256.
      {40, 2, 64, 64, 100, 130}, {17, 1, 7, 7, 33, 33},       {128, 1, 64, 32, 65, 70},
      {8, 2, 256, 256, 129, 130},
  };
  unsigned long long seed = 700;
  for (const GqaCase& c : cases) {
    ++seed;
    Rng rng(seed);
    const Tensor2 q = rng.normal_matrix(c.heads, c.d, 0.0, 2.0);  // spread 2: a softmax far from flat
    Tensor3 k = rng.normal_tensor(c.kv_heads, c.capacity, c.d), v = rng.normal_tensor(c.kv_heads, c.capacity, c.d_v);
    for (std::size_t g = 0; g < c.kv_heads; ++g)
      for (std::size_t t = c.length; t < c.capacity; ++t) {
        for (std::size_t e = 0; e < c.d; ++e) k(g, t, e) = kNaN;
        for (std::size_t e = 0; e < c.d_v; ++e) v(g, t, e) = kNaN;
      }
    const std::size_t group = c.heads / c.kv_heads;
    const Expected expected = oracle(
        c.heads, c.d, c.d_v, c.length, 1.0 / std::sqrt(static_cast<double>(c.d)),
        [&](std::size_t i, std::size_t) { return q.data() + i * c.d; },
        [&](std::size_t i, std::size_t t) { return k.data() + (i / group * c.capacity + t) * c.d; },
        [&](std::size_t i, std::size_t t) { return v.data() + (i / group * c.capacity + t) * c.d_v; });
    for (const std::size_t splits : split_counts(c.length)) {
      const std::string what = "cuda::gqa_decode_attention, " + label_of(c) + ", " + splits_label(splits);
      const cuda::GqaDecodeOutput got = splits == 0 ? cuda::gqa_decode_attention(q, k, v, c.length)
                                                    : cuda::gqa_decode_attention_split_k(q, k, v, c.length, {}, splits);
      EXPECT_TRUE(matches(got.out, expected.out, expected.out_tol,
                          {what + ": out", {"h", "e"}, seed, "",
                           "query head i reads kv head i / (h/g), positions t < length only (the rest are NaN); a "
                           "head past a chunk of 16 or a position past a tile of 32 is the usual miss"}));
      EXPECT_TRUE(matches(got.lse, expected.lse, expected.lse_tol,
                          {what + ": lse", {"h"}, seed, "", "L = m + ln sum_s e^{m_s - m} l_s over the splits"}));
    }
  }
}

// ---- paged caches ----

struct PagedCase {
  std::size_t heads, kv_heads, d, block_size, length, context_len;
};

std::string label_of(const PagedCase& c) {
  return "h " + std::to_string(c.heads) + ", g " + std::to_string(c.kv_heads) + ", d " + std::to_string(c.d) +
         ", block_size " + std::to_string(c.block_size) + ", context_len " + std::to_string(c.context_len) +
         " of " + std::to_string(c.length) + " tokens";
}

TEST(Ch05CudaDecode, cuda_paged_decode_follows_the_block_table_and_equals_the_double_oracle) {
  TVLAB_SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<PagedCase> cases{
      {4, 4, 16, 16, 1, 1},     {8, 2, 64, 16, 100, 100},    {8, 2, 64, 5, 23, 12},  // a prefix ending inside a block
      {8, 1, 128, 1, 37, 37},   {32, 8, 128, 16, 1001, 998}, {6, 2, 5, 3, 31, 31},
      {20, 1, 9, 7, 70, 69},
  };
  unsigned long long seed = 800;
  for (const PagedCase& c : cases) {
    ++seed;
    Rng rng(seed);
    // Two sequences appended token by token take alternate blocks: a table that is not 0, 1, 2, ...
    const std::size_t blocks = (c.length + c.block_size - 1) / c.block_size;
    PagedKvCache cache({.num_blocks = 2 * blocks + 1, .block_size = c.block_size, .num_kv_heads = c.kv_heads,
                        .head_dim = c.d});
    const SequenceId a = cache.add_sequence(), b = cache.add_sequence();
    const Tensor3 k = rng.normal_tensor(c.kv_heads, c.length, c.d), v = rng.normal_tensor(c.kv_heads, c.length, c.d);
    const Tensor3 k_other = rng.normal_tensor(c.kv_heads, c.length, c.d);
    for (std::size_t t = 0; t < c.length; ++t) {
      const Tensor2 k_other_t = xt::view(k_other, xt::all(), t, xt::all());
      const Tensor2 k_t = xt::view(k, xt::all(), t, xt::all()), v_t = xt::view(v, xt::all(), t, xt::all());
      cache.append(b, k_other_t, k_other_t);
      cache.append(a, k_t, v_t);
    }
    const Tensor2 q = rng.normal_matrix(c.heads, c.d, 0.0, 2.0);
    const std::vector<std::size_t>& table = cache.block_table(a);
    const std::size_t group = c.heads / c.kv_heads;
    // Token t of sequence a is column t of k and v: the contiguous form the pages must reproduce.
    const Expected expected = oracle(
        c.heads, c.d, c.d, c.context_len, 1.0 / std::sqrt(static_cast<double>(c.d)),
        [&](std::size_t i, std::size_t) { return q.data() + i * c.d; },
        [&](std::size_t i, std::size_t t) { return k.data() + (i / group * c.length + t) * c.d; },
        [&](std::size_t i, std::size_t t) { return v.data() + (i / group * c.length + t) * c.d; });
    for (const std::size_t splits : split_counts(c.context_len)) {
      const std::string what = "cuda::paged_decode_attention_with_lse, " + label_of(c) + ", " + splits_label(splits);
      const ref::GqaDecodeOutput got =
          splits == 0 ? cuda::paged_decode_attention_with_lse(q, cache, table, c.context_len)
                      : cuda::paged_decode_attention_split_k(q, cache, table, c.context_len, {}, splits);
      EXPECT_TRUE(matches(got.lse, expected.lse, expected.lse_tol, {what + ": lse", {"h"}, seed, "", "L_i = m_i + ln l_i"}));
      EXPECT_TRUE(matches(got.out, expected.out, expected.out_tol,
                          {what, {"h", "c"}, seed, "",
                           "token t is in block block_table[t / b], slot t mod b, of kv head i / (h/g); the pool is "
                           "[num_blocks, num_kv_heads, block_size, head_dim]"}));
    }
  }
}

// ---- MLA's absorbed cache ----

struct MlaCase {
  std::size_t heads, d_c, d_r, length, capacity;
};

std::string label_of(const MlaCase& c) {
  return "n_h " + std::to_string(c.heads) + ", d_c " + std::to_string(c.d_c) + ", d_h^R " + std::to_string(c.d_r) +
         ", length " + std::to_string(c.length) + " of " + std::to_string(c.capacity);
}

TEST(Ch05CudaDecode, cuda_mla_absorbed_decode_equals_the_double_oracle) {
  TVLAB_SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<MlaCase> cases{
      // DeepSeek-V2/V3's widths (128 heads, d_c 512, d_h^R 64), then scaled down, then odd.
      {128, 512, 64, 1, 4}, {128, 512, 64, 7, 8}, {128, 512, 64, 300, 301},
      {16, 64, 16, 129, 130}, {6, 5, 3, 31, 40},  {20, 9, 4, 1, 1},
  };
  unsigned long long seed = 900;
  for (const MlaCase& c : cases) {
    ++seed;
    Rng rng(seed);
    const std::size_t width = c.d_c + c.d_r;
    const Tensor2 q = rng.normal_matrix(c.heads, width, 0.0, 2.0);
    Tensor2 latents = rng.normal_matrix(c.capacity, c.d_c), rope_keys = rng.normal_matrix(c.capacity, c.d_r);
    for (std::size_t t = c.length; t < c.capacity; ++t) {  // free slots, never read
      for (std::size_t e = 0; e < c.d_c; ++e) latents(t, e) = kNaN;
      for (std::size_t e = 0; e < c.d_r; ++e) rope_keys(t, e) = kNaN;
    }
    // The oracle reads the key [c^KV_t; k^R_t] from one row of a concatenated copy, the value c^KV_t.
    std::vector<float> keys(c.length * width);
    for (std::size_t t = 0; t < c.length; ++t) {
      for (std::size_t e = 0; e < c.d_c; ++e) keys[t * width + e] = latents(t, e);
      for (std::size_t e = 0; e < c.d_r; ++e) keys[t * width + c.d_c + e] = rope_keys(t, e);
    }
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.d_c / 4 + c.d_r));  // MLA's 1/sqrt(d_h + d_h^R), d_h = d_c / 4
    const Expected expected = oracle(
        c.heads, width, c.d_c, c.length, scale, [&](std::size_t i, std::size_t) { return q.data() + i * width; },
        [&](std::size_t, std::size_t t) { return keys.data() + t * width; },
        [&](std::size_t, std::size_t t) { return latents.data() + t * c.d_c; });
    for (const std::size_t splits : split_counts(c.length)) {
      const std::string what = "cuda::mla_absorbed_decode_attention, " + label_of(c) + ", " + splits_label(splits);
      const cuda::MlaDecodeAttention got =
          splits == 0 ? cuda::mla_absorbed_decode_attention(q, latents, rope_keys, c.length, scale)
                      : cuda::mla_absorbed_decode_attention_split_k(q, latents, rope_keys, c.length, scale, splits);
      EXPECT_TRUE(matches(got.out_latent, expected.out, expected.out_tol,
                          {what + ": out_latent", {"h", "c"}, seed, "",
                           "s_it = scale (q~_i . c^KV_t + q^R_i . k^R_t), a_i = sum_t p_it c^KV_t: the values are the "
                           "first d_c columns of the key rows"}));
      EXPECT_TRUE(matches(got.lse, expected.lse, expected.lse_tol, {what + ": lse", {"h"}, seed, "", "L_i = m_i + ln l_i"}));
    }
  }
}

// ---- bad input ----

// Runs both calls and passes when each throws tvlab::Error with the same message.
::testing::AssertionResult same_error(const std::function<void()>& cuda_call, const std::function<void()>& ref_call) {
  std::string messages[2];
  const std::function<void()>* calls[2] = {&cuda_call, &ref_call};
  for (int t = 0; t < 2; ++t) {
    try {
      (*calls[t])();
      return ::testing::AssertionFailure() << (t == 0 ? "cuda" : "ref") << " accepted the input";
    } catch (const Error& e) {
      messages[t] = e.what();
    } catch (const std::exception& e) {
      return ::testing::AssertionFailure() << (t == 0 ? "cuda" : "ref") << " threw another exception: " << e.what();
    }
  }
  if (messages[0] == messages[1]) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "cuda says \"" << messages[0] << "\"\nref says  \"" << messages[1] << "\"";
}

// The checks run on the host before any device call: the same errors, word for word, with or
// without a device.
TEST(Ch05CudaDecodeChecks, cuda_decode_rejects_bad_input_with_the_references_words) {
  Rng rng(31);
  const Tensor2 q = rng.normal_matrix(8, 5);
  const Tensor3 k = rng.normal_tensor(2, 6, 5), v = rng.normal_tensor(2, 6, 3);
  const auto gqa_same = [](const Tensor2& q_, const Tensor3& k_, const Tensor3& v_, std::size_t n,
                           std::optional<double> scale = {}) {
    return same_error([&] { cuda::gqa_decode_attention(q_, k_, v_, n, scale); },
                      [&] { ref::gqa_decode_attention(q_, k_, v_, n, scale); });
  };
  EXPECT_TRUE(gqa_same(rng.normal_matrix(7, 5), k, v, 4)) << "7 query heads over 2 kv heads";
  EXPECT_TRUE(gqa_same(q, k, v, 0)) << "length 0";
  EXPECT_TRUE(gqa_same(q, k, v, 7)) << "length 7 of capacity 6";
  EXPECT_TRUE(gqa_same(q, rng.normal_tensor(2, 6, 6), v, 4)) << "keys of head_dim 6 for queries of 5";
  EXPECT_TRUE(gqa_same(q, k, rng.normal_tensor(2, 7, 3), 4)) << "values of capacity 7, keys of 6";
  EXPECT_TRUE(gqa_same(q, k, rng.normal_tensor(3, 6, 3), 4)) << "3 value heads, 2 key heads";
  EXPECT_TRUE(gqa_same(q, k, v, 4, 0.0)) << "scale 0";
  Tensor2 q_nan = q;
  q_nan(3, 1) = kNaN;
  EXPECT_TRUE(gqa_same(q_nan, k, v, 4)) << "q with a NaN";
  EXPECT_TRUE(throws_error_naming([&] { cuda::gqa_decode_attention_split_k(q, k, v, 4, {}, 0); },
                                  {"gqa_decode_attention", "splits (0)"}));

  PagedKvCache cache({.num_blocks = 6, .block_size = 4, .num_kv_heads = 2, .head_dim = 5});
  const SequenceId s = cache.add_sequence();
  cache.append(s, k, k);  // 6 tokens: blocks 0 and 1 in use
  const std::vector<std::size_t> table = cache.block_table(s);
  const auto paged_same = [&](const Tensor2& q_, std::span<const std::size_t> table_, std::size_t n,
                              std::optional<double> scale = {}) {
    return same_error([&] { cuda::paged_decode_attention(q_, cache, table_, n, scale); },
                      [&] { ref::paged_decode_attention(q_, cache, table_, n, scale); });
  };
  EXPECT_TRUE(paged_same(rng.normal_matrix(8, 4), table, 6)) << "queries of head_dim 4 for a cache of 5";
  EXPECT_TRUE(paged_same(rng.normal_matrix(3, 5), table, 6)) << "3 query heads over 2 kv heads";
  EXPECT_TRUE(paged_same(q_nan, table, 6)) << "q with a NaN";
  EXPECT_TRUE(paged_same(q, table, 6, -1.0)) << "scale -1";
  EXPECT_TRUE(paged_same(q, table, 0)) << "context_len 0";
  EXPECT_TRUE(paged_same(q, table, 9)) << "context_len 9 needs 3 blocks, the table has 2";
  EXPECT_TRUE(paged_same(q, std::vector<std::size_t>{0, 6}, 6)) << "block 6 of a pool of 6";
  EXPECT_TRUE(paged_same(q, std::vector<std::size_t>{0, 4}, 6)) << "block 4 is free";
  EXPECT_TRUE(throws_error_naming([&] { cuda::paged_decode_attention(q, cache, table, 6, 1e300); },
                                  {"paged_decode_attention", "scale (1e+300)", "float"}))
      << "a scale the kernel's float cannot hold";
  EXPECT_TRUE(throws_error_naming([&] { cuda::paged_decode_attention_split_k(q, cache, table, 6, {}, 0); },
                                  {"paged_decode_attention", "splits (0)"}));

  const Tensor2 q_mla = rng.normal_matrix(4, 8), latents = rng.normal_matrix(6, 5), rope_keys = rng.normal_matrix(6, 3);
  const auto mla_same = [](const Tensor2& q_, const Tensor2& c_, const Tensor2& r_, std::size_t n, double scale) {
    return same_error([&] { cuda::mla_absorbed_decode_attention(q_, c_, r_, n, scale); },
                      [&] { ref::mla_absorbed_decode_attention(q_, c_, r_, n, scale); });
  };
  EXPECT_TRUE(mla_same(rng.normal_matrix(4, 7), latents, rope_keys, 6, 0.5)) << "q_absorbed of 7 columns, d_c + d_h^R = 8";
  EXPECT_TRUE(mla_same(q_mla, latents, rng.normal_matrix(5, 3), 5, 0.5)) << "rope_keys of 5 rows, latents of 6";
  EXPECT_TRUE(mla_same(q_mla, latents, rope_keys, 0, 0.5)) << "length 0";
  EXPECT_TRUE(mla_same(q_mla, latents, rope_keys, 7, 0.5)) << "length 7 of capacity 6";
  EXPECT_TRUE(mla_same(q_mla, latents, rope_keys, 6, -0.5)) << "scale -0.5";
  Tensor2 latents_nan = latents;
  latents_nan(2, 4) = kNaN;
  EXPECT_TRUE(mla_same(q_mla, latents_nan, rope_keys, 6, 0.5)) << "a NaN in a cached latent";
  EXPECT_TRUE(throws_error_naming(
      [&] { cuda::mla_absorbed_decode_attention_split_k(q_mla, latents, rope_keys, 6, 0.5, 0); },
      {"mla_absorbed_decode_attention", "splits (0)"}));
}

}  // namespace
}  // namespace tvlab::kv
