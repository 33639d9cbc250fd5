// Chapter 05, decoding with a KV cache: a prefill and many decode steps give the outputs of one
// causal pass over the whole sequence at every position (for MHA, GQA and MQA), so does decoding
// without a cache, and the projection multiply-adds each way, counted as the loops run, follow the
// closed forms of analysis::decode_projection_macs (Theta(n d^2) with the cache, Theta(n^2 d^2)
// without). Then the cache's contents, its size, and every error path, each leaving the cache as it was.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "../common/testing.hpp"
#include "kv_test_helpers.hpp"
#include "tvlab/analysis/kv_memory.hpp"
#include "tvlab/core/kv_heads.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/gqa_attention.hpp"
#include "tvlab/ref/kv_cache.hpp"
#include "tvlab/ref/rope.hpp"

namespace tvlab::ch05 {
namespace {

using tvlab::ch05_testing::random_gqa_weights;
using tvlab::ch05_testing::rope_for;
using tvlab::ch05_testing::rows;
using tvlab::testing::reduction_rtol;
using tvlab::testing::throws_error_naming;

std::string label(KvHeads heads) {
  return "h " + std::to_string(heads.num_heads) + ", g " + std::to_string(heads.num_kv_heads);
}

// The cache's whole state, bit for bit (its free slots hold NaN, which == would never call equal).
struct Snapshot {
  std::size_t length;
  std::vector<float> keys, values;
  explicit Snapshot(const ref::KvCache& c)
      : length(c.length()), keys(c.keys().begin(), c.keys().end()), values(c.values().begin(), c.values().end()) {}
  bool operator==(const Snapshot& o) const {
    return length == o.length && keys.size() == o.keys.size() && values.size() == o.values.size() &&
           std::memcmp(keys.data(), o.keys.data(), keys.size() * sizeof(float)) == 0 &&
           std::memcmp(values.data(), o.values.data(), values.size() * sizeof(float)) == 0;
  }
};

const KvHeads kLayouts[] = {{4, 4} /* MHA */, {4, 2} /* GQA */, {4, 1} /* MQA */, {6, 3}};

// ------------------------------------------------------------------ cached decoding = one causal pass

TEST(Ch05KvCache, prefill_and_decode_steps_equal_one_causal_pass_at_every_position) {
  for (const KvHeads heads : kLayouts) {
    Rng rng(200 + static_cast<std::uint64_t>(heads.num_heads * 10 + heads.num_kv_heads));
    const std::size_t d_model = 12, d_k = 4, prompt = 5, n = 16;
    const GqaWeights w = random_gqa_weights(rng, d_model, heads, d_k);
    const Tensor2 x = rng.normal_matrix(n, d_model);
    AttentionConfig causal;
    causal.mask.causal = true;
    const Tensor2 full = ref::grouped_query_attention(x, x, w, heads, causal);

    ref::KvCache cache(heads, d_k, n);  // exactly full at the end
    // Each position's output comes from the same sums in the same order as in the full pass (the
    // masked keys there add exp(-inf) = 0 exactly): equal to the last bit.
    EXPECT_EQ(ref::prefill(cache, rows(x, 0, prompt), w, heads).output, rows(full, 0, prompt)) << label(heads);
    for (std::size_t i = prompt; i < n; ++i) {
      const ref::DecodeOutput step = ref::decode(cache, rows(x, i, i + 1), w, heads);
      EXPECT_EQ(step.output, rows(full, i, i + 1)) << label(heads) << ", position " << i;
      EXPECT_EQ(cache.length(), i + 1);
    }
    // A prompt fed in chunks (chunked prefill) gives the same outputs as well.
    ref::KvCache chunked(heads, d_k, n);
    std::size_t first = 0;
    for (const std::size_t chunk : {3, 1, 7, 5}) {
      EXPECT_EQ(ref::prefill(chunked, rows(x, first, first + chunk), w, heads).output, rows(full, first, first + chunk))
          << label(heads) << ", chunk at " << first;
      first += chunk;
    }
    EXPECT_EQ(chunked.length(), n);
  }
}

TEST(Ch05KvCache, decoding_without_a_cache_recomputes_the_same_outputs) {
  for (const KvHeads heads : kLayouts) {
    Rng rng(300 + static_cast<std::uint64_t>(heads.num_heads * 10 + heads.num_kv_heads));
    const std::size_t d_model = 10, d_k = 3, prompt = 3, n = 12;
    const GqaWeights w = random_gqa_weights(rng, d_model, heads, d_k);
    const Tensor2 x = rng.normal_matrix(n, d_model);
    ref::KvCache cache(heads, d_k, n);
    ref::prefill(cache, rows(x, 0, prompt), w, heads);
    for (std::size_t i = prompt; i < n; ++i) {
      // The recomputed keys and values have the bits of the cached ones, and the attention adds
      // them in the same order: equal to the last bit.
      EXPECT_EQ(ref::decode(cache, rows(x, i, i + 1), w, heads).output,
                ref::decode_without_cache(rows(x, 0, i + 1), w, heads).output)
          << label(heads) << ", position " << i;
    }
  }
}

// -------------------------------------------------------------------------- with rotary positions

TEST(Ch05KvCache, with_rope_the_cache_keeps_rotated_keys_and_decoding_still_equals_one_causal_pass) {
  for (const KvHeads heads : kLayouts) {
    Rng rng(500 + static_cast<std::uint64_t>(heads.num_heads * 10 + heads.num_kv_heads));
    const std::size_t d_model = 12, d_k = 6, prompt = 4, n = 11;
    const GqaWeights w = random_gqa_weights(rng, d_model, heads, d_k);
    const Tensor2 x = rng.normal_matrix(n, d_model);
    const AttentionRope rope = rope_for(d_k, 5);
    AttentionConfig causal;
    causal.mask.causal = true;
    const Tensor2 full = ref::grouped_query_attention(x, x, w, heads, causal, rope);
    ref::KvCache cache(heads, d_k, n);
    // Position p is rotated by the angle (p0 + p) theta_i in either path, from the same numbers:
    // equal to the last bit.
    EXPECT_EQ(ref::prefill(cache, rows(x, 0, prompt), w, heads, rope).output, rows(full, 0, prompt)) << label(heads);
    for (std::size_t i = prompt; i < n; ++i) {
      EXPECT_EQ(ref::decode(cache, rows(x, i, i + 1), w, heads, rope).output, rows(full, i, i + 1))
          << label(heads) << ", position " << i;
      EXPECT_EQ(ref::decode_without_cache(rows(x, 0, i + 1), w, heads, rope).output, rows(full, i, i + 1))
          << label(heads) << ", position " << i << ", without the cache";
    }
    // The layer itself with fewer queries than keys: the queries are the last ones, at p0 + n_k - n_q + i.
    EXPECT_EQ(ref::grouped_query_attention(rows(x, prompt, n), x, w, heads, causal, rope), rows(full, prompt, n))
        << label(heads) << ", the last " << n - prompt << " queries over all " << n << " keys";
    // RoPE is not a no-op here: without it the outputs differ.
    const Tensor2 plain = ref::grouped_query_attention(x, x, w, heads, causal);
    EXPECT_GT(xt::amax(xt::abs(plain - full))(), 1e-2) << label(heads);
  }
}

TEST(Ch05KvCache, with_rope_only_relative_positions_matter_so_a_shifted_start_gives_the_same_outputs) {
  // R(m)^T R(n) = R(n - m) (chapter 02): shifting every position by s leaves every score, hence
  // every output, unchanged up to the rounding of the angles. The angles (p0 + p) theta reach
  // ~1000 rad, where a float cos/sin rounding of the rotated coordinates is ~1e-7 relative, and the
  // output is four chained reductions of O(1) values: 4 reduction_rtol(d_model) covers both.
  const KvHeads heads{4, 2};
  Rng rng(600);
  const std::size_t d_model = 12, d_k = 6, n = 9;
  const GqaWeights w = random_gqa_weights(rng, d_model, heads, d_k);
  const Tensor2 x = rng.normal_matrix(n, d_model);
  ref::KvCache at_zero(heads, d_k, n), shifted(heads, d_k, n);
  ref::prefill(at_zero, rows(x, 0, 3), w, heads, rope_for(d_k, 0));
  ref::prefill(shifted, rows(x, 0, 3), w, heads, rope_for(d_k, 1000));
  const double tol = 4 * reduction_rtol(d_model);
  for (std::size_t i = 3; i < n; ++i) {
    const Tensor2 a = ref::decode(at_zero, rows(x, i, i + 1), w, heads, rope_for(d_k, 0)).output;
    const Tensor2 b = ref::decode(shifted, rows(x, i, i + 1), w, heads, rope_for(d_k, 1000)).output;
    EXPECT_LE(xt::amax(xt::abs(a - b))(), tol * (1 + xt::amax(xt::abs(a))())) << "position " << i;
  }
  // The cached keys themselves differ: they are stored rotated at their absolute positions.
  EXPECT_GT(xt::amax(xt::abs(xt::view(at_zero.keys(), xt::all(), xt::range(0, n), xt::all()) -
                             xt::view(shifted.keys(), xt::all(), xt::range(0, n), xt::all())))(),
            1e-2);
}

TEST(Ch05KvCache, a_bad_rope_is_rejected_naming_it_and_leaves_the_cache_as_it_was) {
  Rng rng(13);
  const KvHeads heads{4, 2};
  const std::size_t d_model = 6, d_k = 4;
  const GqaWeights w = random_gqa_weights(rng, d_model, heads, d_k);
  const Tensor2 x = rng.normal_matrix(3, d_model);
  ref::KvCache cache(heads, d_k, 8);
  ref::prefill(cache, x, w, heads, rope_for(d_k, 0));
  const Snapshot before(cache);
  EXPECT_TRUE(throws_error_naming([&] { ref::decode(cache, rows(x, 0, 1), w, heads, rope_for(d_k, -1)); },
                                  {"decode", "rope.first_position"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::decode(cache, rows(x, 0, 1), w, heads, rope_for(6, 0)); }, {"decode", "inv_freq"}));
  EXPECT_TRUE(Snapshot(cache) == before) << "a rejected call changed the cache";
  EXPECT_TRUE(throws_error_naming([&] { ref::decode_without_cache(x, w, heads, rope_for(d_k, -2)); },
                                  {"decode_without_cache", "rope.first_position"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::grouped_query_attention(x, x, w, heads, {}, rope_for(d_k, -3)); },
                                  {"grouped_query_attention", "rope.first_position"}));
}

// ------------------------------------------------------------------------------ what the cache saves

TEST(Ch05KvCache, projection_multiply_adds_follow_the_closed_forms_with_and_without_the_cache) {
  for (const KvHeads heads : kLayouts)
    for (const std::size_t prompt : {1, 4})
      for (const std::size_t new_tokens : {0, 1, 9}) {
        Rng rng(400 + prompt * 10 + new_tokens);
        const std::size_t d_model = 8, d_k = 3, n = prompt + new_tokens;
        const GqaWeights w = random_gqa_weights(rng, d_model, heads, d_k);
        const Tensor2 x = rng.normal_matrix(n, d_model);
        // Counted in the loops: the prompt's pass, then one step per new token, each way.
        ref::KvCache cache(heads, d_k, n);
        std::uint64_t with = ref::prefill(cache, rows(x, 0, prompt), w, heads).projection_macs;
        std::uint64_t without = with;
        for (std::size_t i = prompt; i < n; ++i) {
          with += ref::decode(cache, rows(x, i, i + 1), w, heads).projection_macs;
          without += ref::decode_without_cache(rows(x, 0, i + 1), w, heads).projection_macs;
        }
        const std::string what = label(heads) + ", prompt " + std::to_string(prompt) + ", new " + std::to_string(new_tokens);
        EXPECT_EQ(with, analysis::decode_projection_macs(prompt, new_tokens, d_model, heads, d_k, true)) << what;
        EXPECT_EQ(without, analysis::decode_projection_macs(prompt, new_tokens, d_model, heads, d_k, false)) << what;
      }
}

TEST(Ch05KvCache, without_a_cache_the_cost_grows_quadratically_with_it_linearly) {
  // d = 8, h = 4, g = 2, d_k = 3 by hand: one token through W_q (8 x 12), W_k, W_v (8 x 6) and
  // W_o (12 x 8) costs 96 + 48 + 48 + 96 = 288 multiply-adds.
  const KvHeads heads{4, 2};
  const auto macs = [&](std::size_t n, bool cache) { return analysis::decode_projection_macs(1, n, 8, heads, 3, cache); };
  EXPECT_EQ(macs(0, true), 288u);
  EXPECT_EQ(macs(0, false), 288u);
  // With the cache each new token costs the same 288: the first difference is constant.
  // Without, step s re-projects the keys and values of all s tokens (2 * 48 each): the second
  // difference is constant, 96 per token, the mark of a quadratic.
  for (std::size_t n = 1; n < 40; ++n) {
    EXPECT_EQ(macs(n, true) - macs(n - 1, true), 288u) << "n " << n;
    if (n >= 2) {
      EXPECT_EQ(macs(n, false) - 2 * macs(n - 1, false) + macs(n - 2, false), 96u) << "n " << n;
    }
  }
  // The two agree on the first step's projections of the new token and part ways from the second.
  EXPECT_EQ(macs(1, false) - macs(1, true), 96u);  // the prompt's key and value once more
  EXPECT_GT(macs(1000, false), 100 * macs(1000, true));
}

TEST(Ch05KvCache, a_cache_of_g_kv_heads_holds_g_over_h_of_what_mha_holds) {
  const std::size_t d_k = 8, capacity = 32;
  const ref::KvCache mha({8, 8}, d_k, capacity), gqa({8, 2}, d_k, capacity), mqa({8, 1}, d_k, capacity);
  EXPECT_EQ(mha.keys().size() + mha.values().size(), 2 * 8 * d_k * capacity);  // 2 h d_k per position
  EXPECT_EQ(4 * gqa.keys().size(), mha.keys().size());                         // g/h = 1/4
  EXPECT_EQ(8 * mqa.values().size(), mha.values().size());                     // 1/h
}

TEST(Ch05KvCache, the_cache_holds_each_tokens_projected_key_and_value_and_nan_beyond) {
  Rng rng(7);
  const KvHeads heads{4, 2};
  const std::size_t d_model = 6, d_k = 3;
  const GqaWeights w = random_gqa_weights(rng, d_model, heads, d_k);
  const Tensor2 x = rng.normal_matrix(5, d_model);
  ref::KvCache cache(heads, d_k, 8);
  ref::prefill(cache, rows(x, 0, 4), w, heads);
  ref::decode(cache, rows(x, 4, 5), w, heads);
  ASSERT_EQ(cache.length(), 5u);
  for (std::size_t j = 0; j < 2; ++j)
    for (std::size_t p = 0; p < 8; ++p)
      for (std::size_t d = 0; d < d_k; ++d) {
        if (p >= 5) {
          EXPECT_TRUE(std::isnan(cache.keys()(j, p, d)) && std::isnan(cache.values()(j, p, d))) << "free slot " << p;
          continue;
        }
        // k^(j)_p = x_p W_k^(j) in double: the float result is that sum rounded once (a length-6 sum: rtol 1e-6).
        double k = 0.0, v = 0.0;
        for (std::size_t c = 0; c < d_model; ++c) {
          k += static_cast<double>(x(p, c)) * w.w_k(c, j * d_k + d);
          v += static_cast<double>(x(p, c)) * w.w_v(c, j * d_k + d);
        }
        EXPECT_NEAR(cache.keys()(j, p, d), k, 1e-6 * (1 + std::fabs(k))) << "kv head " << j << ", position " << p;
        EXPECT_NEAR(cache.values()(j, p, d), v, 1e-6 * (1 + std::fabs(v))) << "kv head " << j << ", position " << p;
      }
  cache.clear();
  EXPECT_EQ(cache.length(), 0u);
  EXPECT_TRUE(std::isnan(cache.keys()(0, 0, 0)));
}

// ------------------------------------------------------------------------------------ bad input

TEST(Ch05KvCache, appending_past_the_capacity_names_it_and_leaves_the_cache_as_it_was) {
  Rng rng(11);
  const KvHeads heads{4, 2};
  const std::size_t d_model = 6, d_k = 3, capacity = 5;
  const GqaWeights w = random_gqa_weights(rng, d_model, heads, d_k);
  const Tensor2 x = rng.normal_matrix(7, d_model);
  ref::KvCache cache(heads, d_k, capacity);
  ref::prefill(cache, rows(x, 0, 4), w, heads);
  const Snapshot before(cache);
  EXPECT_TRUE(throws_error_naming([&] { ref::prefill(cache, rows(x, 4, 6), w, heads); }, {"prefill", "capacity (5)"}));
  EXPECT_TRUE(Snapshot(cache) == before) << "a prefill past the capacity changed the cache";
  EXPECT_TRUE(throws_error_naming([&] { cache.append(rng.normal_tensor(2, 2, 3), rng.normal_tensor(2, 2, 3)); },
                                  {"KvCache::append", "capacity (5)"}));
  EXPECT_TRUE(Snapshot(cache) == before) << "an append past the capacity changed the cache";
  // The last free slot, then one too many.
  ref::decode(cache, rows(x, 4, 5), w, heads);
  const Snapshot full(cache);
  EXPECT_TRUE(throws_error_naming([&] { ref::decode(cache, rows(x, 5, 6), w, heads); }, {"decode", "capacity (5)"}));
  EXPECT_TRUE(Snapshot(cache) == full) << "a decode past the capacity changed the cache";
}

TEST(Ch05KvCache, rejects_bad_input_naming_the_parameter_and_leaves_the_cache_as_it_was) {
  Rng rng(12);
  const KvHeads heads{4, 2};
  const std::size_t d_model = 6, d_k = 3;
  const GqaWeights w = random_gqa_weights(rng, d_model, heads, d_k);
  const Tensor2 x = rng.normal_matrix(3, d_model);
  ref::KvCache cache(heads, d_k, 8);
  ref::prefill(cache, x, w, heads);
  const Snapshot before(cache);
  const auto unchanged = [&] { return Snapshot(cache) == before; };

  EXPECT_TRUE(throws_error_naming([&] { ref::decode(cache, rows(x, 0, 2), w, heads); }, {"decode", "x_token", "rows, expected 1"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::decode(cache, rng.normal_matrix(1, 5), w, heads); }, {"decode", "x_token", "d_model"}));
  Tensor2 nan_token = rows(x, 0, 1);
  nan_token(0, 2) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { ref::decode(cache, nan_token, w, heads); }, {"decode", "x_token", "non-finite"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::prefill(cache, Tensor2::from_shape({0, d_model}), w, heads); }, {"x", "empty"}));
  // Weights of another layout, or a cache made for another one.
  const GqaWeights mqa = random_gqa_weights(rng, d_model, {4, 1}, d_k);
  EXPECT_TRUE(throws_error_naming([&] { ref::decode(cache, rows(x, 0, 1), mqa, heads); }, {"w_k", "num_kv_heads * head_dim"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::decode(cache, rows(x, 0, 1), mqa, {4, 1}); }, {"cache", "num_kv_heads 2"}));
  const GqaWeights wide = random_gqa_weights(rng, d_model, heads, 4);
  EXPECT_TRUE(throws_error_naming([&] { ref::decode(cache, rows(x, 0, 1), wide, heads); }, {"cache", "head_dim 3"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::decode(cache, rows(x, 0, 1), w, {4, 3}); }, {"decode", "num_kv_heads (3)"}));
  // Finite inputs whose keys would overflow the scores.
  Tensor2 huge = rows(x, 0, 1);
  huge *= 1e20f;  // keys and queries near 1e20: q . k near 1e40
  EXPECT_TRUE(throws_error_naming([&] { ref::decode(cache, huge, w, heads); }, {"decode", "float's range"}));
  // append's own checks.
  EXPECT_TRUE(throws_error_naming([&] { cache.append(rng.normal_tensor(4, 1, 3), rng.normal_tensor(4, 1, 3)); },
                                  {"KvCache::append", "k", "heads 4", "expected 2"}));
  EXPECT_TRUE(throws_error_naming([&] { cache.append(rng.normal_tensor(2, 1, 3), rng.normal_tensor(2, 2, 3)); },
                                  {"v", "seq 2", "expected 1"}));
  EXPECT_TRUE(throws_error_naming([&] { cache.append(rng.normal_tensor(2, 1, 3), rng.normal_tensor(2, 1, 4)); }, {"v", "head_dim"}));
  Tensor3 k_nan = rng.normal_tensor(2, 1, 3);
  k_nan(1, 0, 2) = INFINITY;
  EXPECT_TRUE(throws_error_naming([&] { cache.append(k_nan, rng.normal_tensor(2, 1, 3)); }, {"k", "non-finite"}));
  EXPECT_TRUE(unchanged()) << "a rejected call changed the cache";

  EXPECT_TRUE(throws_error_naming([] { ref::KvCache({4, 2}, 3, 0); }, {"KvCache", "capacity", "positive"}));
  EXPECT_TRUE(throws_error_naming([] { ref::KvCache({4, 2}, 0, 8); }, {"KvCache", "head_dim", "positive"}));
  EXPECT_TRUE(throws_error_naming([] { ref::KvCache({4, 3}, 3, 8); }, {"KvCache", "num_kv_heads (3)"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::decode_without_cache(rng.normal_matrix(3, 5), w, heads); },
                                  {"decode_without_cache", "x", "d_model"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::decode_without_cache(x, w, {8, 2}); }, {"decode_without_cache", "w_q"}));
}

TEST(Ch05KvCache, the_cost_calculator_rejects_zero_sizes_and_counts_beyond_64_bits) {
  const KvHeads heads{4, 2};
  EXPECT_TRUE(throws_error_naming([&] { analysis::decode_projection_macs(0, 3, 8, heads, 3, true); }, {"prompt_length"}));
  EXPECT_TRUE(throws_error_naming([&] { analysis::decode_projection_macs(1, 3, 0, heads, 3, true); }, {"d_model"}));
  EXPECT_TRUE(throws_error_naming([&] { analysis::decode_projection_macs(1, 3, 8, heads, 0, true); }, {"head_dim"}));
  EXPECT_TRUE(throws_error_naming([&] { analysis::decode_projection_macs(1, 3, 8, {4, 3}, 3, true); }, {"num_kv_heads (3)"}));
  EXPECT_TRUE(throws_error_naming([&] { analysis::decode_projection_macs(1, std::size_t{1} << 40, 4096, heads, 128, false); },
                                  {"decode_projection_macs", "64 bits"}));
  // The sum p + n and the doubling 2 d are checked too (they wrapped to small counts once).
  constexpr std::size_t top = std::numeric_limits<std::size_t>::max();
  EXPECT_TRUE(throws_error_naming([&] { analysis::decode_projection_macs(top, 1, 1, {1, 1}, 1, true); },
                                  {"decode_projection_macs", "64 bits"}));
  EXPECT_TRUE(throws_error_naming([&] { analysis::decode_projection_macs(1, 0, top / 2 + 1, {1, 1}, 1, true); },
                                  {"decode_projection_macs", "64 bits"}));
}

}  // namespace
}  // namespace tvlab::ch05
