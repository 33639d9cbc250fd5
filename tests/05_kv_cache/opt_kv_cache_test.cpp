// Chapter 05, the optimized layer with its KV cache (tvlab/opt/kv_cache.hpp) against the reference
// (tvlab/ref/kv_cache.hpp): the same prompt prefilled, then the same tokens decoded one at a time,
// each into its own cache, for MHA, GQA and MQA, with and without RoPE. At every step the outputs
// and the cached keys and values agree, and the projection multiply-adds are the same count. Then
// decoding without a cache, a prompt prefilled in two chunks, and the errors, which leave the cache
// as it was.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "kv_test_helpers.hpp"
#include "tvlab/core/kv_heads.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/opt/kv_cache.hpp"
#include "tvlab/ref/kv_cache.hpp"
#include "tvlab/ref/rope.hpp"

namespace tvlab::ch05 {
namespace {

using tvlab::ch05_testing::random_gqa_weights;
using tvlab::ch05_testing::rope_for;
using tvlab::ch05_testing::rows;
using tvlab::testing::matches;
using tvlab::testing::reduction_rtol;
using tvlab::testing::throws_error_naming;

struct LayerCase {
  const char* label;
  KvHeads heads;
  std::size_t d_model, d_k, prompt, new_tokens;
  bool rope;
};
void PrintTo(const LayerCase& c, std::ostream* out) { *out << c.label; }

// The reference accumulates in double and rounds once; the optimized layer runs float SGEMMs and
// a float softmax. Its error is a few roundings of each of the chain's reductions, the longest of
// them K = max(d_model, h d_k, n) terms of values of order 1 (inputs N(0, 1), projections of
// variance 1/fan_in): reduction_rtol(K) relative, and 1e-5 absolute for outputs near 0.
Tolerance layer_tolerance(const LayerCase& c) {
  const std::size_t k = std::max({c.d_model, static_cast<std::size_t>(c.heads.num_heads) * c.d_k, c.prompt + c.new_tokens});
  return {1e-5, reduction_rtol(k)};
}

class OptKvCacheLayer : public ::testing::TestWithParam<LayerCase> {};

TEST_P(OptKvCacheLayer, prefill_and_decode_equal_the_reference_step_by_step) {
  const LayerCase& c = GetParam();
  const std::uint64_t seed = 2100 + c.d_model + c.prompt;
  Rng rng(seed);
  const std::size_t n = c.prompt + c.new_tokens;
  const GqaWeights w = random_gqa_weights(rng, c.d_model, c.heads, c.d_k);
  const Tensor2 x = rng.normal_matrix(n, c.d_model);
  const std::optional<AttentionRope> rope = c.rope ? std::optional(rope_for(c.d_k, 3)) : std::nullopt;
  ref::KvCache expected_cache(c.heads, c.d_k, n), cache(c.heads, c.d_k, n);
  const Tolerance tol = layer_tolerance(c);
  const auto expect_step = [&](const ref::DecodeOutput& got, const ref::DecodeOutput& want, const std::string& step) {
    EXPECT_TRUE(matches(got.output, xt::eval(xt::cast<double>(want.output)), tol,
                        {std::string(c.label) + ", " + step + ": output", {"i", "c"}, seed, "",
                         "query head t reads kv head t / (h/g); token i attends to positions 0 .. n0 + i"}));
    EXPECT_EQ(got.projection_macs, want.projection_macs) << step << ": t d d_k (2h + 2g) multiply-adds";
    const std::size_t cached = expected_cache.length();
    ASSERT_EQ(cache.length(), cached) << step;
    const auto filled = [cached](const Tensor3& t) -> DTensor3 {
      return xt::cast<double>(xt::view(t, xt::all(), xt::range(0, cached), xt::all()));
    };
    EXPECT_TRUE(matches(Tensor3(xt::view(cache.keys(), xt::all(), xt::range(0, cached), xt::all())),
                        filled(expected_cache.keys()), tol,
                        {std::string(c.label) + ", " + step + ": cached keys", {"j", "p", "e"}, seed, "",
                         "k_p = x_p W_k^(j), rotated at p0 + p with RoPE"}));
    EXPECT_TRUE(matches(Tensor3(xt::view(cache.values(), xt::all(), xt::range(0, cached), xt::all())),
                        filled(expected_cache.values()), tol,
                        {std::string(c.label) + ", " + step + ": cached values", {"j", "p", "e"}, seed, "", ""}));
  };
  expect_step(opt::prefill(cache, rows(x, 0, c.prompt), w, c.heads, rope),
              ref::prefill(expected_cache, rows(x, 0, c.prompt), w, c.heads, rope), "prefill");
  for (std::size_t i = c.prompt; i < n; ++i)
    expect_step(opt::decode(cache, rows(x, i, i + 1), w, c.heads, rope),
                ref::decode(expected_cache, rows(x, i, i + 1), w, c.heads, rope), "decode of token " + std::to_string(i));
  // Without a cache: the last token's output from every token's projections again.
  const ref::DecodeOutput want = ref::decode_without_cache(x, w, c.heads, rope);
  const ref::DecodeOutput got = opt::decode_without_cache(x, w, c.heads, rope);
  EXPECT_TRUE(matches(got.output, xt::eval(xt::cast<double>(want.output)), tol,
                      {std::string(c.label) + ", decode_without_cache", {"i", "c"}, seed, "", ""}));
  EXPECT_EQ(got.projection_macs, want.projection_macs) << "2 n d g d_k + 2 d h d_k";
}

// All the case's tokens prefilled in two chunks (the second attending to the first through the
// cache, the causal mask aligned bottom-right) give the outputs of one prefill.
TEST_P(OptKvCacheLayer, a_prompt_in_two_chunks_equals_one_prefill) {
  const LayerCase& c = GetParam();
  const std::uint64_t seed = 2300 + c.d_model + c.prompt;
  Rng rng(seed);
  const std::size_t n = c.prompt + c.new_tokens, half = n / 2;
  const GqaWeights w = random_gqa_weights(rng, c.d_model, c.heads, c.d_k);
  const Tensor2 x = rng.normal_matrix(n, c.d_model);
  const std::optional<AttentionRope> rope = c.rope ? std::optional(rope_for(c.d_k, 3)) : std::nullopt;
  ref::KvCache whole(c.heads, c.d_k, n), chunked(c.heads, c.d_k, n);
  const Tensor2 once = ref::prefill(whole, x, w, c.heads, rope).output;
  const Tensor2 first = opt::prefill(chunked, rows(x, 0, half), w, c.heads, rope).output;
  const Tensor2 second = opt::prefill(chunked, rows(x, half, n), w, c.heads, rope).output;
  const Tolerance tol = layer_tolerance(c);
  EXPECT_TRUE(matches(first, xt::eval(xt::cast<double>(rows(once, 0, half))), tol,
                      {std::string(c.label) + ": the first chunk", {"i", "c"}, seed, "", ""}));
  EXPECT_TRUE(matches(second, xt::eval(xt::cast<double>(rows(once, half, n))), tol,
                      {std::string(c.label) + ": the second chunk", {"i", "c"}, seed, "",
                       "token i of the chunk sits at position n0 + i and sees positions 0 .. n0 + i"}));
}

const LayerCase kLayerCases[] = {
    {"MHA h 4, d 16, d_k 4, 5 + 3 tokens", {4, 4}, 16, 4, 5, 3, false},
    {"GQA h 4 g 2, d 16, d_k 4, 5 + 3 tokens, RoPE", {4, 2}, 16, 4, 5, 3, true},
    {"MQA h 6, d 12, d_k 6, 1 + 4 tokens, RoPE", {6, 1}, 12, 6, 1, 4, true},
    {"GQA h 6 g 3, d 10, d_k 5, 9 + 2 tokens", {6, 3}, 10, 5, 9, 2, false},
    {"GQA h 8 g 2, d 64, d_k 16, 70 + 5 tokens, RoPE", {8, 2}, 64, 16, 70, 5, true},
};
INSTANTIATE_TEST_SUITE_P(Ch05, OptKvCacheLayer, ::testing::ValuesIn(kLayerCases),
                         [](const auto& info) { return tvlab::testing::identifier(info.param.label); });

// Bad input: the reference's messages, and the cache left as it was (bit for bit, NaN slots too).
TEST(Ch05OptKvCache, rejects_bad_input_naming_the_parameter_and_leaves_the_cache_as_it_was) {
  Rng rng(12);
  const KvHeads heads{4, 2};
  const std::size_t d_model = 6, d_k = 3;
  const GqaWeights w = random_gqa_weights(rng, d_model, heads, d_k);
  const Tensor2 x = rng.normal_matrix(3, d_model);
  ref::KvCache cache(heads, d_k, 4);
  opt::prefill(cache, x, w, heads);
  const Tensor3 keys = cache.keys(), values = cache.values();
  const auto unchanged = [&] {
    const auto same = [](const Tensor3& a, const Tensor3& b) {
      return std::equal(a.begin(), a.end(), b.begin(), [](float p, float q) { return p == q || (std::isnan(p) && std::isnan(q)); });
    };
    return cache.length() == 3 && same(cache.keys(), keys) && same(cache.values(), values);
  };
  EXPECT_TRUE(throws_error_naming([&] { opt::decode(cache, rows(x, 0, 2), w, heads); }, {"decode", "x_token", "rows, expected 1"}));
  EXPECT_TRUE(throws_error_naming([&] { opt::decode(cache, rng.normal_matrix(1, 5), w, heads); }, {"decode", "x_token", "d_model"}));
  Tensor2 nan_token = rows(x, 0, 1);
  nan_token(0, 2) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { opt::decode(cache, nan_token, w, heads); }, {"decode", "x_token", "non-finite"}));
  EXPECT_TRUE(throws_error_naming([&] { opt::prefill(cache, Tensor2::from_shape({0, d_model}), w, heads); }, {"x", "empty"}));
  EXPECT_TRUE(throws_error_naming([&] { opt::prefill(cache, rows(x, 0, 2), w, heads); }, {"prefill", "capacity (4)"}));
  const GqaWeights mqa = random_gqa_weights(rng, d_model, {4, 1}, d_k);
  EXPECT_TRUE(throws_error_naming([&] { opt::decode(cache, rows(x, 0, 1), mqa, heads); }, {"w_k", "num_kv_heads * head_dim"}));
  EXPECT_TRUE(throws_error_naming([&] { opt::decode(cache, rows(x, 0, 1), mqa, {4, 1}); }, {"cache", "num_kv_heads 2"}));
  const GqaWeights wide = random_gqa_weights(rng, d_model, heads, 4);
  EXPECT_TRUE(throws_error_naming([&] { opt::decode(cache, rows(x, 0, 1), wide, heads); }, {"cache", "head_dim 3"}));
  Tensor2 huge = rows(x, 0, 1);
  huge *= 1e20f;  // keys and queries near 1e20: q . k near 1e40
  EXPECT_TRUE(throws_error_naming([&] { opt::decode(cache, huge, w, heads); }, {"decode", "float's range"}));
  RopeConfig odd;
  odd.head_dim = 4;
  const AttentionRope wrong_width{ref::rope_frequencies(odd), RopeLayout::half_split, 0};
  EXPECT_TRUE(throws_error_naming([&] { opt::decode(cache, rows(x, 0, 1), w, heads, wrong_width); }, {"decode"}));
  EXPECT_TRUE(unchanged()) << "a rejected call changed the cache";
  EXPECT_TRUE(throws_error_naming([&] { opt::decode_without_cache(rng.normal_matrix(3, 5), w, heads); },
                                  {"decode_without_cache", "x", "d_model"}));
  EXPECT_TRUE(throws_error_naming([&] { opt::decode_without_cache(x, w, {8, 2}); }, {"decode_without_cache", "w_q"}));
  EXPECT_TRUE(throws_error_naming([&] { opt::decode_without_cache(Tensor2(x * 1e20f), w, heads); },
                                  {"decode_without_cache", "float's range"}));
}

}  // namespace
}  // namespace tvlab::ch05
