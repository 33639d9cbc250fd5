// Chapter 05's suites, run over every backend of its registry: the decode step of grouped-query
// attention over a KV cache (contiguous, laid out per token, in bf16, quantized, paged) and MLA's
// absorbed decode step equal a double-precision oracle for MHA, GQA and MQA shapes, read only the
// cached positions (the free slots after them hold NaN), and name the bad parameter. The student's
// entry is exercise 05.1, the contiguous step.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "tvlab/core/dtype.hpp"
#include "tvlab/core/kv_bf16.hpp"
#include "tvlab/core/kv_quant.hpp"
#include "tvlab/core/paged_kv_cache.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::kv {
namespace {

using tvlab::testing::matches;
using tvlab::testing::reduction_rtol;
using tvlab::testing::throws_error_naming;

struct DecodeCase {
  const char* label;
  std::size_t heads, kv_heads, head_dim, head_dim_v, capacity, length;
};
void PrintTo(const DecodeCase& c, std::ostream* out) { *out << c.label; }

// The oracle, from the definition, in double: query head t reads kv head t / (h/g);
// s_tp = scale q_t . k_p over p < length, o_t = sum_p softmax_p(s_t) v_p, lse_t = log sum_p e^{s_tp}.
struct Oracle {
  DTensor2 out;
  DTensor1 lse;
};
Oracle decode_oracle(const Tensor2& q, const Tensor3& k, const Tensor3& v, std::size_t length, double scale) {
  const std::size_t h = q.shape()[0], d = q.shape()[1], g = k.shape()[0], d_v = v.shape()[2];
  Oracle o{xt::zeros<double>({h, d_v}), xt::zeros<double>({h})};
  for (std::size_t t = 0; t < h; ++t) {
    const std::size_t j = t / (h / g);
    std::vector<double> s(length);
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t p = 0; p < length; ++p) {
      double dot = 0.0;
      for (std::size_t e = 0; e < d; ++e) dot += static_cast<double>(q(t, e)) * k(j, p, e);
      s[p] = scale * dot;
      m = std::max(m, s[p]);
    }
    double sum = 0.0;
    for (std::size_t p = 0; p < length; ++p) sum += std::exp(s[p] - m);
    for (std::size_t p = 0; p < length; ++p)
      for (std::size_t e = 0; e < d_v; ++e) o.out(t, e) += std::exp(s[p] - m) / sum * v(j, p, e);
    o.lse(t) = m + std::log(sum);
  }
  return o;
}

// Caches whose free slots (positions length .. capacity - 1) hold NaN, as ref::KvCache's do: a
// decode that reads past the length returns NaN.
struct Inputs {
  Tensor2 q;
  Tensor3 k, v;
};
Inputs make_inputs(const DecodeCase& c, std::uint64_t seed) {
  Rng rng(seed);
  Inputs in{rng.normal_matrix(c.heads, c.head_dim), rng.normal_tensor(c.kv_heads, c.capacity, c.head_dim),
            rng.normal_tensor(c.kv_heads, c.capacity, c.head_dim_v)};
  in.k(0, c.length - 1, 0) *= 6.0f;  // an outlier key, so that the softmax is not flat
  const float nan = std::numeric_limits<float>::quiet_NaN();
  xt::view(in.k, xt::all(), xt::range(c.length, c.capacity), xt::all()) = nan;
  xt::view(in.v, xt::all(), xt::range(c.length, c.capacity), xt::all()) = nan;
  return in;
}

class DecodeCases : public ::testing::TestWithParam<std::tuple<Backend, DecodeCase>> {};

TEST_P(DecodeCases, matches_the_double_oracle) {
  const auto& [backend, c] = GetParam();
  TVLAB_EXERCISE(backend, "05.1");
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const std::uint64_t seed = 500 + c.heads * 31 + c.kv_heads * 7 + c.length;
  const Inputs in = make_inputs(c, seed);
  for (const std::optional<double> scale : {std::optional<double>{}, std::optional<double>{0.3}}) {
    const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
    const Oracle oracle = decode_oracle(in.q, in.k, in.v, c.length, s);
    const DecodeAttention got = backend.decode(in.q, in.k, in.v, c.length, scale);
    // Scores are dot products of length d (values of order 6 at most), the output a weighted
    // average of `length` values of order 1: a few float roundings of each.
    const Tolerance tol{1e-5, reduction_rtol(std::max(c.head_dim, c.length))};
    const std::string what = std::string("gqa_decode_attention, ") + c.label + ", scale " +
                             (scale ? std::to_string(*scale) : std::string("1/sqrt(d)"));
    EXPECT_TRUE(matches(got.out, oracle.out, tol,
                        {what + ": out",
                         {"t", "e"},
                         seed,
                         std::string("tvlab kv --step --backend ") + backend.name,
                         "query head t reads kv head t / (h/g) (consecutive heads share one), over positions "
                         "0 .. length - 1 only: the slots after them are free"}));
    EXPECT_TRUE(
        matches(got.lse, oracle.lse, {1e-5, 1e-6},
                {what + ": lse", {"t"}, seed, "", "lse_t = m_t + log sum_p exp(s_tp - m_t), m_t = max_p s_tp"}));
  }
}

const DecodeCase kCases[] = {
    {"MHA h 4, d 8, 6 of 9 slots", 4, 4, 8, 8, 9, 6},
    {"GQA h 8 g 2, d 16, 13 of 16 slots", 8, 2, 16, 16, 16, 13},
    {"GQA h 6 g 3, d 5, d_v 7, 11 of 11 slots", 6, 3, 5, 7, 11, 11},
    {"MQA h 8, d 4, 1 of 4 slots", 8, 1, 4, 4, 4, 1},
    {"MQA h 4, d 32, 200 of 257 slots", 4, 1, 32, 32, 257, 200},
};
INSTANTIATE_TEST_SUITE_P(Ch05, DecodeCases,
                         ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(),
                                                                                           &Backend::decode)),
                                            ::testing::ValuesIn(kCases)),
                         tvlab::testing::ImplCaseName());

class DecodeErrors : public ::testing::TestWithParam<Backend> {};

TEST_P(DecodeErrors, bad_input_names_the_parameter) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "05.1");
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const Inputs in = make_inputs({"GQA h 4 g 2", 4, 2, 8, 8, 6, 4}, 3);
  auto decode = [&](const Tensor2& q, const Tensor3& k, const Tensor3& v, std::size_t length,
                    std::optional<double> scale = std::nullopt) {
    return [&backend, q, k, v, length, scale] { backend.decode(q, k, v, length, scale); };
  };
  EXPECT_TRUE(throws_error_naming(decode(in.q, in.k, in.v, 0), {"length"})) << "length 0";
  EXPECT_TRUE(throws_error_naming(decode(in.q, in.k, in.v, 7), {"length", "capacity"})) << "length 7 > capacity 6";
  EXPECT_TRUE(throws_error_naming(decode(in.q, in.k, in.v, 4, -1.0), {"scale"})) << "scale -1";
  const Inputs three_heads = make_inputs({"h 3 g 2", 3, 2, 8, 8, 6, 4}, 4);
  // ("num_heads (3" and "num_kv_heads (2", in the library as in the exercise)
  EXPECT_TRUE(throws_error_naming(decode(three_heads.q, in.k, in.v, 4), {"num_heads (3", "num_kv_heads (2"})) << "h = 3, g = 2";
  const Tensor3 narrow_k = xt::view(in.k, xt::all(), xt::all(), xt::range(0, 7));
  EXPECT_TRUE(throws_error_naming(decode(in.q, narrow_k, in.v, 4), {"k_cache"})) << "k_cache of head_dim 7, q of 8";
  const Tensor3 short_v = xt::view(in.v, xt::all(), xt::range(0, 5), xt::all());
  EXPECT_TRUE(throws_error_naming(decode(in.q, in.k, short_v, 4), {"v_cache"})) << "v_cache capacity 5, k_cache 6";
  Tensor2 q_nan = in.q;
  q_nan(1, 2) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming(decode(q_nan, in.k, in.v, 4), {"q"})) << "q with NaN";
  // Past `length` the slots are free: whatever they hold is never read.
  Tensor3 k_free_inf = in.k;
  k_free_inf(1, 5, 0) = std::numeric_limits<float>::infinity();
  EXPECT_NO_THROW(backend.decode(in.q, k_free_inf, in.v, 4, std::nullopt)) << "inf in a free slot (position 5 of 4)";
  // The cache is not scanned (a second pass over it would double the bytes a step reads); a
  // non-finite cached value among the first `length` positions shows in the result, which is checked.
  // (Exercise 05.1 asks for the checks of the inputs, not for this check of the result.)
  if (backend.kind == BackendKind::student) return;
  Tensor3 k_inf = in.k, v_nan = in.v;
  k_inf(1, 2, 3) = std::numeric_limits<float>::infinity();
  v_nan(0, 3, 0) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming(decode(in.q, k_inf, in.v, 4), {"k_cache or v_cache", "not finite"}))
      << "k_cache with inf at position 2";
  EXPECT_TRUE(throws_error_naming(decode(in.q, in.k, v_nan, 4), {"k_cache or v_cache", "not finite"}))
      << "v_cache with NaN at position 3";
}

TEST_P(DecodeErrors, a_full_cache_and_one_position_are_valid) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "05.1");
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const Inputs in = make_inputs({"GQA h 4 g 2", 4, 2, 8, 8, 6, 6}, 5);
  const DecodeAttention full = backend.decode(in.q, in.k, in.v, 6, std::nullopt);
  EXPECT_EQ(full.out.shape()[0], 4u);
  EXPECT_EQ(full.lse.shape()[0], 4u);
  // One cached position: each head's output is that position's value, its lse its one score.
  const DecodeAttention one = backend.decode(in.q, in.k, in.v, 1, std::nullopt);
  for (std::size_t t = 0; t < 4; ++t)
    for (std::size_t e = 0; e < 8; ++e) EXPECT_NEAR(one.out(t, e), in.v(t / 2, 0, e), 1e-6) << "head " << t;
}

INSTANTIATE_TEST_SUITE_P(Ch05, DecodeErrors,
                         ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::decode)),
                         tvlab::testing::ImplName());


// ------------------------------------------------- the decode step over bf16, quantized and per token caches

// The decode step over caches that hold other numbers, or the same numbers elsewhere: each backend
// against decode_oracle over the float values the cache stands for (bf16 widened exactly, codes
// dequantized, the per token layout read back per head), on kCases's shapes and inputs.

class Bf16DecodeCases : public ::testing::TestWithParam<std::tuple<Backend, DecodeCase>> {};

// A bf16 cache of the case's inputs (free slots NaN).
TEST_P(Bf16DecodeCases, match_the_double_oracle_over_the_cached_values) {
  const auto& [backend, c] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const std::uint64_t seed = 1500 + c.heads * 31 + c.kv_heads * 7 + c.length;
  const Inputs in = make_inputs(c, seed);
  // to_bf16_kv takes finite values only: the free slots are made NaN in bf16 afterwards.
  const auto bf16_cache = [&c](const Tensor3& x) {
    Tensor3 finite = x;
    xt::view(finite, xt::all(), xt::range(c.length, c.capacity), xt::all()) = 0.0f;
    Bf16Kv cache = to_bf16_kv(finite);
    for (std::size_t j = 0; j < cache.heads; ++j)
      for (std::size_t p = c.length; p < cache.capacity; ++p)
        std::fill_n(cache.bits.begin() + (j * cache.capacity + p) * cache.head_dim, cache.head_dim,
                    float_to_bf16_bits(std::numeric_limits<float>::quiet_NaN()));
    return cache;
  };
  const Bf16Kv k = bf16_cache(in.k), v = bf16_cache(in.v);
  const Tensor3 k_values = from_bf16_kv(k), v_values = from_bf16_kv(v);  // exact: bf16 is a float's top half
  for (const std::optional<double> scale : {std::optional<double>{}, std::optional<double>{0.3}}) {
    const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
    const Oracle oracle = decode_oracle(in.q, k_values, v_values, c.length, s);
    const DecodeAttention got = backend.bf16_decode(in.q, k, v, c.length, scale);
    const Tolerance tol{1e-5, reduction_rtol(std::max(c.head_dim, c.length))};
    const std::string what = std::string("bf16_kv_decode_attention, ") + c.label;
    EXPECT_TRUE(matches(got.out, oracle.out, tol,
                        {what + ": out", {"t", "e"}, seed, "",
                         "a bf16 value is the top 16 bits of a float: widened by a shift, exactly"}));
    EXPECT_TRUE(matches(got.lse, oracle.lse, {1e-5, 1e-6}, {what + ": lse", {"t"}, seed, "", ""}));
  }
}

// The case's first `length` positions quantized in four formats (the quantized step attends to
// every position it is given): INT8 per token, KIVI (INT8 keys per channel over groups of 4
// tokens, values per token), FP8 E4M3 per token, and INT4 in groups of 2 channels where the head
// dimension allows it.
class QuantizedDecodeCases : public ::testing::TestWithParam<std::tuple<Backend, DecodeCase>> {};

TEST_P(QuantizedDecodeCases, match_the_double_oracle_over_the_dequantized_values) {
  const auto& [backend, c] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const std::uint64_t seed = 1700 + c.heads * 31 + c.kv_heads * 7 + c.length;
  Inputs in = make_inputs(c, seed);
  // Quantized keys and values have one shape: values of d channels where the case's have d_v.
  if (c.head_dim_v != c.head_dim) in.v = Rng(seed + 1).normal_tensor(c.kv_heads, c.capacity, c.head_dim);
  const auto cached = [&c](const Tensor3& x) -> Tensor3 {
    return xt::view(x, xt::all(), xt::range(0, c.length), xt::all());
  };
  const std::size_t d = c.head_dim;
  std::vector<std::pair<std::string, std::pair<KvQuantSpec, KvQuantSpec>>> formats = {
      {"int8 per token", {int8_per_token(d), int8_per_token(d)}},
      {"KIVI", {int8_per_channel(4), int8_per_token(d)}},
      {"fp8 e4m3", {fp8_e4m3_per_token(d), fp8_e4m3_per_token(d)}}};
  if (d % 2 == 0) formats.push_back({"int4 groups of 2", {int4_per_group(2), int4_per_group(2, true)}});
  for (const auto& [name, specs] : formats) {
    const QuantizedKv k = quantize_kv(cached(in.k), specs.first), v = quantize_kv(cached(in.v), specs.second);
    const double s = 1.0 / std::sqrt(static_cast<double>(d));
    const Oracle oracle = decode_oracle(in.q, dequantize_kv(k), dequantize_kv(v), c.length, s);
    const Tensor2 got = backend.quantized_decode(in.q, k, v, std::nullopt);
    // As the float cache's: the dequantized values are floats of order 1 (the outlier key 6).
    const Tolerance tol{1e-5, reduction_rtol(std::max(d, c.length))};
    EXPECT_TRUE(matches(got, oracle.out, tol,
                        {std::string("quantized_kv_decode_attention, ") + c.label + ", " + name,
                         {"t", "e"}, seed, "",
                         "x^ = s q (+ z) with the scale (and minimum) of the element's group: per token, "
                         "group_size channels of a row; per channel, a row of d scales per group of tokens"}));
  }
}

class PerTokenDecodeCases : public ::testing::TestWithParam<std::tuple<Backend, DecodeCase>> {};

// The case's caches laid out per token, [capacity, g, d]: the same numbers, the same result.
TEST_P(PerTokenDecodeCases, match_the_double_oracle) {
  const auto& [backend, c] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const std::uint64_t seed = 1900 + c.heads * 31 + c.kv_heads * 7 + c.length;
  const Inputs in = make_inputs(c, seed);
  const Tensor3 k_tokens = xt::transpose(in.k, {1, 0, 2}), v_tokens = xt::transpose(in.v, {1, 0, 2});
  const Oracle oracle = decode_oracle(in.q, in.k, in.v, c.length, 1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  const DecodeAttention got = backend.per_token_decode(in.q, k_tokens, v_tokens, c.length, std::nullopt);
  const Tolerance tol{1e-5, reduction_rtol(std::max(c.head_dim, c.length))};
  const std::string what = std::string("gqa_decode_attention_per_token, ") + c.label;
  EXPECT_TRUE(matches(got.out, oracle.out, tol,
                      {what + ": out", {"t", "e"}, seed, "",
                       "position p of kv head j is row (p, j) of the [capacity, g, d] cache, g d floats after row "
                       "(p - 1, j)"}));
  EXPECT_TRUE(matches(got.lse, oracle.lse, {1e-5, 1e-6}, {what + ": lse", {"t"}, seed, "", ""}));
}

class Bf16DecodeErrors : public ::testing::TestWithParam<Backend> {};

TEST_P(Bf16DecodeErrors, bad_input_names_the_parameter) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const Inputs in = make_inputs({"GQA h 4 g 2", 4, 2, 8, 8, 5, 5}, 8);
  const Bf16Kv k = to_bf16_kv(in.k), v = to_bf16_kv(in.v);
  Bf16Kv k_short = k;
  k_short.bits.pop_back();
  const Bf16Kv v_longer = to_bf16_kv(Rng(9).normal_tensor(2, 6, 8));
  auto step = [&](const Bf16Kv& keys, const Bf16Kv& values, std::size_t length, std::optional<double> scale = {}) {
    return [&backend, &keys, &values, &in, length, scale] { backend.bf16_decode(in.q, keys, values, length, scale); };
  };
  EXPECT_TRUE(throws_error_naming(step(k, v, 0), {"bf16_kv_decode_attention", "length (0)"})) << "length 0";
  EXPECT_TRUE(throws_error_naming(step(k, v, 6), {"length (6)", "capacity = 5"})) << "length 6 > capacity 5";
  EXPECT_TRUE(throws_error_naming(step(k, v, 5, -1.0), {"scale"})) << "scale -1";
  EXPECT_TRUE(throws_error_naming(step(k_short, v, 5), {"k_cache holds 79 values", "needs 80"})) << "79 of 80 values";
  EXPECT_TRUE(throws_error_naming(step(k, v_longer, 5), {"v_cache", "capacity 6"})) << "v_cache capacity 6";
}

class QuantizedDecodeErrors : public ::testing::TestWithParam<Backend> {};

TEST_P(QuantizedDecodeErrors, bad_input_names_the_parameter) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const Inputs in = make_inputs({"GQA h 4 g 2", 4, 2, 8, 8, 5, 5}, 8);
  const QuantizedKv k = quantize_kv(in.k, int8_per_token(8)), v = quantize_kv(in.v, int8_per_token(8));
  const QuantizedKv v_short = quantize_kv(xt::eval(xt::view(in.v, xt::all(), xt::range(0, 4), xt::all())),
                                          int8_per_token(8));
  QuantizedKv k_broken = k;
  k_broken.scales.pop_back();
  QuantizedKv v_empty;
  v_empty.spec = int8_per_token(8);
  auto step = [&](const QuantizedKv& keys, const QuantizedKv& values, std::optional<double> scale = {}) {
    return [&backend, &keys, &values, &in, scale] { backend.quantized_decode(in.q, keys, values, scale); };
  };
  EXPECT_TRUE(throws_error_naming(step(k, v_short), {"quantized_kv_decode_attention", "v has shape [2, 4, 8]"}))
      << "v of 4 tokens, k of 5";
  EXPECT_TRUE(throws_error_naming(step(k, v, 0.0), {"scale (0)"})) << "scale 0";
  EXPECT_TRUE(throws_error_naming(step(k_broken, v), {"k has", "scales"})) << "a scale missing";
  EXPECT_TRUE(throws_error_naming(step(k, v_empty), {"v is empty"})) << "v empty";
}

class PerTokenDecodeErrors : public ::testing::TestWithParam<Backend> {};

TEST_P(PerTokenDecodeErrors, bad_input_names_the_parameter) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const Inputs in = make_inputs({"GQA h 4 g 2", 4, 2, 8, 8, 5, 5}, 8);
  const Tensor3 k_tokens = xt::transpose(in.k, {1, 0, 2}), v_tokens = xt::transpose(in.v, {1, 0, 2});
  const Tensor3 v_longer = Rng(10).normal_tensor(6, 2, 8);
  auto step = [&](const Tensor3& values, std::size_t length, std::optional<double> scale = {}) {
    return [&backend, &k_tokens, &values, &in, length, scale] {
      backend.per_token_decode(in.q, k_tokens, values, length, scale);
    };
  };
  EXPECT_TRUE(throws_error_naming(step(v_tokens, 0), {"length (0)"})) << "length 0";
  EXPECT_TRUE(throws_error_naming(step(v_tokens, 6), {"length (6)", "capacity"})) << "length 6 > capacity 5";
  EXPECT_TRUE(throws_error_naming(step(v_tokens, 5, -1.0), {"scale"})) << "scale -1";
  EXPECT_TRUE(throws_error_naming(step(v_longer, 5), {"v_cache", "capacity 6"})) << "v_cache capacity 6";
}

// Each over the registry's backends that provide the step.
INSTANTIATE_TEST_SUITE_P(Ch05, Bf16DecodeCases,
                         ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(),
                                                                                           &Backend::bf16_decode)),
                                            ::testing::ValuesIn(kCases)),
                         tvlab::testing::ImplCaseName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Bf16DecodeCases);  // not an exercise
INSTANTIATE_TEST_SUITE_P(Ch05, Bf16DecodeErrors,
                         ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::bf16_decode)),
                         tvlab::testing::ImplName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Bf16DecodeErrors);  // not an exercise
INSTANTIATE_TEST_SUITE_P(Ch05, QuantizedDecodeCases,
                         ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(),
                                                                                           &Backend::quantized_decode)),
                                            ::testing::ValuesIn(kCases)),
                         tvlab::testing::ImplCaseName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(QuantizedDecodeCases);  // not an exercise
INSTANTIATE_TEST_SUITE_P(Ch05, QuantizedDecodeErrors,
                         ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::quantized_decode)),
                         tvlab::testing::ImplName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(QuantizedDecodeErrors);  // not an exercise
INSTANTIATE_TEST_SUITE_P(Ch05, PerTokenDecodeCases,
                         ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(),
                                                                                           &Backend::per_token_decode)),
                                            ::testing::ValuesIn(kCases)),
                         tvlab::testing::ImplCaseName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PerTokenDecodeCases);  // not an exercise
INSTANTIATE_TEST_SUITE_P(Ch05, PerTokenDecodeErrors,
                         ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::per_token_decode)),
                         tvlab::testing::ImplName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PerTokenDecodeErrors);  // not an exercise

// ------------------------------------------------------------------------------- paged decode

struct PagedCase {
  const char* label;
  std::size_t heads, kv_heads, head_dim, block_size, length;
};
void PrintTo(const PagedCase& c, std::ostream* out) { *out << c.label; }

// A pool with room to spare (the blocks a sequence gets are then not 0, 1, 2, ...: a first
// sequence of 5 tokens takes a block before ours) and one sequence of `length` random tokens, an
// outlier key among them. The unwritten slots of its last block hold NaN (the pool's fill).
struct PagedInputs {
  PagedKvCache cache;
  SequenceId seq;
  Tensor2 q;
};
PagedInputs make_paged_inputs(const PagedCase& c, std::uint64_t seed) {
  Rng rng(seed);
  const std::size_t blocks = (c.length + c.block_size - 1) / c.block_size;
  PagedInputs in{PagedKvCache({.num_blocks = 2 * blocks + 4,
                               .block_size = c.block_size,
                               .num_kv_heads = c.kv_heads,
                               .head_dim = c.head_dim}),
                 0, rng.normal_matrix(c.heads, c.head_dim)};
  const SequenceId other = in.cache.add_sequence();
  in.cache.append(other, rng.normal_tensor(c.kv_heads, 5, c.head_dim), rng.normal_tensor(c.kv_heads, 5, c.head_dim));
  in.seq = in.cache.add_sequence();
  Tensor3 k = rng.normal_tensor(c.kv_heads, c.length, c.head_dim);
  k(0, c.length / 2, 0) = 6.0f;  // an outlier key, so that the softmax is not flat
  in.cache.append(in.seq, k, rng.normal_tensor(c.kv_heads, c.length, c.head_dim));
  return in;
}

// One paged step against the double oracle over the gathered keys and values, and against the
// same backend's contiguous step over them (pages change where the numbers are, not the result).
void expect_paged_step(const Backend& backend, const Tensor2& q, const PagedKvCache& cache, SequenceId seq,
                       std::size_t context_len, std::optional<double> scale, std::uint64_t seed,
                       const std::string& label) {
  const Tensor3 keys = cache.gather_keys(seq), values = cache.gather_values(seq);
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(cache.head_dim())));
  const Oracle oracle = decode_oracle(q, keys, values, context_len, s);
  const DecodeAttention got = backend.paged_decode(q, cache, cache.block_table(seq), context_len, scale);
  const Tolerance tol{1e-5, reduction_rtol(std::max(cache.head_dim(), context_len))};
  const std::string what = "paged_decode_attention, " + label + ", context_len " + std::to_string(context_len);
  EXPECT_TRUE(matches(got.out, oracle.out, tol,
                      {what + ": out",
                       {"t", "e"},
                       seed,
                       "",
                       "token p is slot p mod b of block T[p / b]; query head t reads kv head t / (h/g); only the "
                       "first context_len tokens count (the rest of the last block is NaN)"}));
  EXPECT_TRUE(matches(got.lse, oracle.lse, {1e-5, 1e-6},
                      {what + ": lse", {"t"}, seed, "", "lse_t = m_t + log sum_p exp(s_tp - m_t), m_t = max_p s_tp"}));
  if (backend.decode) {
    const DecodeAttention contiguous = backend.decode(q, keys, values, context_len, scale);
    const DTensor2 contiguous_out = xt::cast<double>(contiguous.out);
    EXPECT_TRUE(matches(got.out, contiguous_out, tol,
                        {what + ": paged against the contiguous step over the gathered cache", {"t", "e"}, seed, "",
                         "the same arithmetic over the same numbers, read through the block table"}));
  }
}

class PagedCases : public ::testing::TestWithParam<std::tuple<Backend, PagedCase>> {};

TEST_P(PagedCases, matches_the_double_oracle_and_the_contiguous_step) {
  const auto& [backend, c] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const std::uint64_t seed = 900 + c.heads * 31 + c.kv_heads * 7 + c.length;
  const PagedInputs in = make_paged_inputs(c, seed);
  for (const std::optional<double> scale : {std::optional<double>{}, std::optional<double>{0.3}})
    expect_paged_step(backend, in.q, in.cache, in.seq, c.length, scale, seed, c.label);
  // A prefix of the sequence, ending inside a block: the slots after it are data, not to be read.
  const std::size_t drop = c.block_size / 2 + 1, prefix = c.length > drop ? c.length - drop : 1;
  expect_paged_step(backend, in.q, in.cache, in.seq, prefix, std::nullopt, seed, std::string(c.label) + ", a prefix");
}

const PagedCase kPagedCases[] = {
    {"MHA h 4, d 8, b 4, 13 tokens", 4, 4, 8, 4, 13},
    {"GQA h 8 g 2, d 16, b 16, 37 tokens", 8, 2, 16, 16, 37},
    {"GQA h 6 g 3, d 5, b 3, 1 token", 6, 3, 5, 3, 1},
    {"GQA h 32 g 8, d 128, b 16, 1000 tokens", 32, 8, 128, 16, 1000},
    {"MQA h 16, d 40, b 16, 700 tokens", 16, 1, 40, 16, 700},
    {"MQA h 8, d 32, b 5, 601 tokens", 8, 1, 32, 5, 601},
};
INSTANTIATE_TEST_SUITE_P(Ch05, PagedCases,
                         ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(),
                                                                                           &Backend::paged_decode)),
                                            ::testing::ValuesIn(kPagedCases)),
                         tvlab::testing::ImplCaseName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PagedCases);  // not an exercise

class PagedSequences : public ::testing::TestWithParam<Backend> {};

// Beam search's pattern: a prompt, then two samples forked from it that share its blocks and
// write their own tokens (the shared last block copied on the first write). Each reads its own
// table: the shared prompt blocks and its private last block.
TEST_P(PagedSequences, forked_sequences_read_their_shared_blocks) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const PagedCase c{"GQA h 8 g 2, d 16, b 8", 8, 2, 16, 8, 29};
  PagedInputs in = make_paged_inputs(c, 77);
  Rng rng(78);
  const SequenceId first = in.cache.fork(in.seq), second = in.cache.fork(in.seq);
  for (int token = 0; token < 5; ++token) {
    in.cache.append(first, rng.normal_matrix(c.kv_heads, c.head_dim), rng.normal_matrix(c.kv_heads, c.head_dim));
    in.cache.append(second, rng.normal_matrix(c.kv_heads, c.head_dim), rng.normal_matrix(c.kv_heads, c.head_dim));
  }
  const auto& table1 = in.cache.block_table(first);
  const auto& table2 = in.cache.block_table(second);
  ASSERT_EQ(table1[0], table2[0]) << "the forks share the prompt's first block";
  ASSERT_NE(table1.back(), table2.back()) << "each fork wrote its own copy of the last block";
  for (const SequenceId seq : {in.seq, first, second})
    expect_paged_step(backend, in.q, in.cache, seq, in.cache.length(seq), std::nullopt, 77,
                      "sequence " + std::to_string(seq) + " of a prompt and two forks");
}

TEST_P(PagedSequences, bad_input_names_the_parameter) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const PagedCase c{"GQA h 4 g 2, d 8, b 4", 4, 2, 8, 4, 10};
  const PagedInputs in = make_paged_inputs(c, 5);
  const std::vector<std::size_t> table = in.cache.block_table(in.seq);  // 3 blocks for 10 tokens
  const std::size_t pool = 2 * 3 + 4;
  auto step = [&](const Tensor2& q, std::vector<std::size_t> t, std::size_t n, std::optional<double> scale = {}) {
    return [&backend, &in, q, t, n, scale] { backend.paged_decode(q, in.cache, t, n, scale); };
  };
  EXPECT_TRUE(throws_error_naming(step(in.q, table, 0), {"context_len"})) << "context_len 0";
  EXPECT_TRUE(throws_error_naming(step(in.q, table, 13), {"block_table has 3 entries", "context_len (13)"}))
      << "13 tokens need 4 blocks";
  EXPECT_TRUE(throws_error_naming(step(in.q, {table[0], pool, table[2]}, 10), {"block_table[1]", "out of range"}))
      << "a block past the pool";
  EXPECT_TRUE(throws_error_naming(step(in.q, {table[0], pool - 1, table[2]}, 10), {"block_table[1]", "free block"}))
      << "a free block";
  EXPECT_TRUE(throws_error_naming(step(Rng(6).normal_matrix(3, 8), table, 10), {"num_heads (3", "num_kv_heads (2"}))
      << "h = 3, g = 2";
  EXPECT_TRUE(throws_error_naming(step(Rng(6).normal_matrix(4, 7), table, 10), {"q", "head_dim"})) << "d 7, cache 8";
  Tensor2 q_nan = in.q;
  q_nan(2, 5) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming(step(q_nan, table, 10), {"q", "non-finite"})) << "q with NaN";
  EXPECT_TRUE(throws_error_naming(step(in.q, table, 10, -1.0), {"scale (-1)"})) << "scale -1";
  EXPECT_TRUE(throws_error_naming(step(in.q, table, 10, 1e300), {"scale"})) << "scale beyond float";
}

INSTANTIATE_TEST_SUITE_P(Ch05, PagedSequences,
                         ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::paged_decode)),
                         tvlab::testing::ImplName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PagedSequences);  // not an exercise

// ------------------------------------------------------------------------- MLA absorbed decode

struct MlaCase {
  const char* label;
  std::size_t heads, d_c, d_r, capacity, length;
};
void PrintTo(const MlaCase& c, std::ostream* out) { *out << c.label; }

// The oracle, from the definition, in double: s_ij = scale (q~_i . c_j + q^R_i . k^R_j) over
// j < length, a_i = sum_j softmax_j(s_i) c_j, L_i = log sum_j e^{s_ij}.
Oracle mla_oracle(const Tensor2& q, const Tensor2& latents, const Tensor2& rope_keys, std::size_t length, double scale) {
  const std::size_t h = q.shape()[0], d_c = latents.shape()[1], d_r = rope_keys.shape()[1];
  Oracle o{xt::zeros<double>({h, d_c}), xt::zeros<double>({h})};
  std::vector<double> s(length);
  for (std::size_t i = 0; i < h; ++i) {
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < length; ++j) {
      double dot = 0.0;
      for (std::size_t e = 0; e < d_c; ++e) dot += static_cast<double>(q(i, e)) * latents(j, e);
      for (std::size_t e = 0; e < d_r; ++e) dot += static_cast<double>(q(i, d_c + e)) * rope_keys(j, e);
      s[j] = scale * dot;
      m = std::max(m, s[j]);
    }
    double sum = 0.0;
    for (std::size_t j = 0; j < length; ++j) sum += std::exp(s[j] - m);
    for (std::size_t j = 0; j < length; ++j)
      for (std::size_t e = 0; e < d_c; ++e) o.out(i, e) += std::exp(s[j] - m) / sum * latents(j, e);
    o.lse(i) = m + std::log(sum);
  }
  return o;
}

struct MlaInputs {
  Tensor2 q, latents, rope_keys;
};
// A latent cache whose rows past `length` hold NaN: a step that reads them returns NaN.
MlaInputs make_mla_inputs(const MlaCase& c, std::uint64_t seed) {
  Rng rng(seed);
  MlaInputs in{rng.normal_matrix(c.heads, c.d_c + c.d_r), rng.normal_matrix(c.capacity, c.d_c),
               rng.normal_matrix(c.capacity, c.d_r)};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  xt::view(in.latents, xt::range(c.length, c.capacity), xt::all()) = nan;
  xt::view(in.rope_keys, xt::range(c.length, c.capacity), xt::all()) = nan;
  return in;
}

class MlaCases : public ::testing::TestWithParam<std::tuple<Backend, MlaCase>> {};

TEST_P(MlaCases, matches_the_double_oracle) {
  const auto& [backend, c] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const std::uint64_t seed = 1300 + c.heads * 31 + c.d_c + c.length;
  const MlaInputs in = make_mla_inputs(c, seed);
  // MLA's scale 1 / sqrt(d_h + d_h^R) with d_h = d_c / 4, as DeepSeek-V2's 128 of 512.
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d_c / 4 + c.d_r));
  const Oracle oracle = mla_oracle(in.q, in.latents, in.rope_keys, c.length, scale);
  const ref::MlaDecodeAttention got = backend.mla_decode(in.q, in.latents, in.rope_keys, c.length, scale);
  // Scores are sums of d_c + d_h^R products (magnitude up to scale sum_e |q_e k_e|), the output a
  // weighted average of unit-normal latents: attention_tolerance's bound.
  double magnitude = 0.0;
  for (std::size_t i = 0; i < c.heads; ++i)
    for (std::size_t j = 0; j < c.length; ++j) {
      double sum = 0.0;
      for (std::size_t e = 0; e < c.d_c; ++e) sum += std::abs(in.q(i, e) * in.latents(j, e));
      for (std::size_t e = 0; e < c.d_r; ++e) sum += std::abs(in.q(i, c.d_c + e) * in.rope_keys(j, e));
      magnitude = std::max(magnitude, scale * sum);
    }
  const double max_v = xt::amax(xt::abs(xt::view(in.latents, xt::range(0, c.length), xt::all())))();
  const double atol = attention_tolerance(c.d_c + c.d_r, c.length, magnitude, max_v);
  EXPECT_TRUE(matches(got.out_latent, oracle.out, {atol, 0.0},
                      {std::string("mla_absorbed_decode_attention, ") + c.label + ": out_latent",
                       {"i", "c"},
                       seed,
                       "",
                       "every head reads the same latent rows c_j and RoPE keys k^R_j, positions 0 .. length - 1 "
                       "only"}));
  EXPECT_TRUE(matches(got.lse, oracle.lse, {reduction_rtol(c.d_c + c.d_r) * magnitude, 1e-6},
                      {std::string("mla_absorbed_decode_attention, ") + c.label + ": lse", {"i"}, seed, "",
                       "lse_i = m_i + log sum_j exp(s_ij - m_i)"}));
}

const MlaCase kMlaCases[] = {
    {"h 4, d_c 16, d_r 8, 9 of 12 rows", 4, 16, 8, 12, 9},
    {"h 1, d_c 7, d_r 3, 1 of 2 rows", 1, 7, 3, 2, 1},
    {"h 16, d_c 64, d_r 16, 300 of 301 rows", 16, 64, 16, 301, 300},
    {"h 128, d_c 512, d_r 64, 97 of 128 rows", 128, 512, 64, 128, 97},
};
INSTANTIATE_TEST_SUITE_P(Ch05, MlaCases,
                         ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(),
                                                                                           &Backend::mla_decode)),
                                            ::testing::ValuesIn(kMlaCases)),
                         tvlab::testing::ImplCaseName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(MlaCases);  // not an exercise

class MlaErrors : public ::testing::TestWithParam<Backend> {};

TEST_P(MlaErrors, bad_input_names_the_parameter) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const MlaInputs in = make_mla_inputs({"h 4, d_c 16, d_r 8", 4, 16, 8, 6, 4}, 11);
  auto step = [&](const Tensor2& q, const Tensor2& latents, const Tensor2& rope_keys, std::size_t length,
                  double scale = 0.25) {
    return [&backend, q, latents, rope_keys, length, scale] { backend.mla_decode(q, latents, rope_keys, length, scale); };
  };
  EXPECT_TRUE(throws_error_naming(step(in.q, in.latents, in.rope_keys, 0), {"length (0)"})) << "length 0";
  EXPECT_TRUE(throws_error_naming(step(in.q, in.latents, in.rope_keys, 7), {"length (7)", "capacity"}))
      << "length 7 > capacity 6";
  EXPECT_TRUE(throws_error_naming(step(in.q, in.latents, in.rope_keys, 4, -1.0), {"scale"})) << "scale -1";
  const Tensor2 narrow_q = xt::view(in.q, xt::all(), xt::range(0, 23));
  EXPECT_TRUE(throws_error_naming(step(narrow_q, in.latents, in.rope_keys, 4), {"q_absorbed"}))
      << "q_absorbed of 23 columns, d_c + d_r = 24";
  const Tensor2 short_rope = xt::view(in.rope_keys, xt::range(0, 5), xt::all());
  EXPECT_TRUE(throws_error_naming(step(in.q, in.latents, short_rope, 4), {"rope_keys"})) << "rope_keys of 5 rows";
  Tensor2 q_nan = in.q;
  q_nan(1, 2) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming(step(q_nan, in.latents, in.rope_keys, 4), {"q_absorbed"})) << "q_absorbed with NaN";
  Tensor2 latents_inf = in.latents;
  latents_inf(3, 0) = std::numeric_limits<float>::infinity();  // a cached position: an error
  EXPECT_TRUE(throws_error_naming(step(in.q, latents_inf, in.rope_keys, 4), {"latents"})) << "latents with inf at row 3";
  Tensor2 rope_nan = in.rope_keys;
  rope_nan(0, 1) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming(step(in.q, in.latents, rope_nan, 4), {"rope_keys"})) << "rope_keys with NaN at row 0";
}

INSTANTIATE_TEST_SUITE_P(Ch05, MlaErrors,
                         ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::mla_decode)),
                         tvlab::testing::ImplName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(MlaErrors);  // not an exercise

}  // namespace
}  // namespace tvlab::kv
