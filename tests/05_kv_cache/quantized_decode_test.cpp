// Chapter 05, the optimized decode step over caches of narrower numbers (bf16, INT8, INT4, FP8
// E4M3, dequantized inside the kernel) and over a cache laid out per token: each equals its
// double-precision reference for MHA, GQA and MQA, reads no position past `length`, stays within
// the provable error bound of quantization against the float cache, and refuses bad input.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../common/testing.hpp"
#include "tvlab/core/dtype.hpp"
#include "tvlab/core/kv_bf16.hpp"
#include "tvlab/core/kv_quant.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/opt/gqa_decode.hpp"
#include "tvlab/opt/bf16_kv_decode.hpp"
#include "tvlab/opt/kv_layout_decode.hpp"
#include "tvlab/opt/quantized_kv_attention.hpp"
#include "tvlab/ref/bf16_kv_decode.hpp"
#include "tvlab/ref/gqa_decode.hpp"
#include "tvlab/ref/quantized_kv_attention.hpp"

namespace tvlab::opt {
namespace {

using tvlab::testing::matches;
using tvlab::testing::throws_error_naming;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// A key spec and a value spec, as a cache stores them.
struct Format {
  const char* name;
  KvQuantSpec key, value;
};

// Every kind of group the kernel dequantizes, for head_dim d (d even, a multiple of 4): per token
// (one scale per token, or per group of channels, symmetric or with a minimum), per channel
// (KIVI's keys; groups of 5 tokens, so that no length below is a whole number of groups), INT8,
// INT4 and FP8 codes.
std::vector<Format> formats(std::size_t d) {
  const std::size_t group = std::min<std::size_t>(32, d / 2);
  return {
      {"int8 per token", int8_per_token(d), int8_per_token(d)},
      {"KIVI: int8 keys per channel (groups of 5 tokens), values per token", int8_per_channel(5), int8_per_token(d)},
      {"int4 per group, asymmetric", int4_per_group(group), int4_per_group(group)},
      {"int4 per group, symmetric", int4_per_group(group, true), int4_per_group(group, true)},
      {"fp8 e4m3 per token", fp8_e4m3_per_token(d), fp8_e4m3_per_token(d)},
      {"int8 per group of 4 channels, asymmetric", {KvCodeType::int8, KvScaleAxis::per_token, 4, false},
       {KvCodeType::int8, KvScaleAxis::per_token, 4, false}},
      {"int4 keys per channel (groups of 5 tokens), asymmetric", {KvCodeType::int4, KvScaleAxis::per_channel, 5, false},
       int4_per_group(group)},
  };
}

struct Shape {
  std::size_t heads, kv_heads, d, length;
};

std::string label_of(const Shape& s, const char* format) {
  return std::string(format) + ", h " + std::to_string(s.heads) + ", g " + std::to_string(s.kv_heads) + ", d " +
         std::to_string(s.d) + ", length " + std::to_string(s.length);
}

// MHA, GQA (4 query heads per kv head), MQA, and MQA with 32 query heads (the micro-kernel path),
// at d = 128 and a small d; lengths 1, 37 and 301: no multiple of the 32-position block, of a
// group of 5 tokens or of a split.
const std::vector<Shape>& shapes() {
  static const std::vector<Shape> all{
      {4, 4, 128, 1}, {4, 4, 128, 37}, {32, 8, 128, 37}, {32, 8, 128, 301}, {8, 1, 128, 301},
      {32, 1, 128, 301}, {6, 2, 8, 37}, {16, 1, 8, 301},
  };
  return all;
}

// Keys as models have them: N(0, 1) with one channel 20 times larger (KIVI's observation).
Tensor3 keys_with_an_outlier_channel(Rng& rng, std::size_t heads, std::size_t seq, std::size_t d) {
  Tensor3 k = rng.normal_tensor(heads, seq, d);
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t t = 0; t < seq; ++t) k(h, t, 3 % d) *= 20.0f;
  return k;
}

// The float tolerance of a decode step over dequantized keys k^ and values v^ against a double
// oracle over the same values (as tests/05_kv_cache/gqa_decode_test.cpp): atol =
// attention_tolerance(d, n, M, max|v^|) with M = scale max_i |q_i| max_t |k^_t| (Cauchy-Schwarz),
// rtol = 2 reduction_rtol(max(d, n)). Dequantizing in float (s q rounded once, z + s q twice) moves
// each element by 2^-23 relative at most, far inside 10 eps sqrt(K).
Tolerance tolerance_of(const Tensor2& q, const Tensor3& k_hat, const Tensor3& v_hat, std::size_t length) {
  const std::size_t d = q.shape()[1];
  auto max_row_norm = [](const float* x, std::size_t rows, std::size_t dim) {
    double best = 0.0;
    for (std::size_t r = 0; r < rows; ++r) {
      double sum = 0.0;
      for (std::size_t e = 0; e < dim; ++e) sum += double{x[r * dim + e]} * x[r * dim + e];
      best = std::max(best, std::sqrt(sum));
    }
    return best;
  };
  double k_norm = 0.0, v_max = 0.0;
  const std::size_t capacity = k_hat.shape()[1], d_v = v_hat.shape()[2];
  for (std::size_t g = 0; g < k_hat.shape()[0]; ++g) {
    k_norm = std::max(k_norm, max_row_norm(k_hat.data() + g * capacity * d, length, d));
    for (std::size_t t = 0; t < length; ++t)
      for (std::size_t e = 0; e < d_v; ++e) v_max = std::max(v_max, double{std::fabs(v_hat(g, t, e))});
  }
  const double m = max_row_norm(q.data(), q.shape()[0], d) * k_norm / std::sqrt(static_cast<double>(d));
  return {attention_tolerance(d, length, m, v_max), 2 * reduction_rtol(std::max(d, length))};
}

// Sets the scales of every per-token group at positions >= length to NaN: a kernel that reads a
// position past `length` returns NaN. (Per channel, scales are shared by the tokens of a group and
// stay as they are.)
void poison_past(QuantizedKv& x, std::size_t length) {
  if (x.spec.axis != KvScaleAxis::per_token) return;
  for (std::size_t h = 0; h < x.heads; ++h)
    for (std::size_t t = length; t < x.seq; ++t)
      for (std::size_t c = 0; c < x.head_dim; c += x.spec.group_size) x.scales[x.group_index(h, t, c)] = kNan;
}

// ------------------------------------------------------------------------------ quantized caches

// With length = seq, the contract of ref::quantized_kv_decode_attention: the same dequantized
// values, attention in double there and in float here.
TEST(QuantizedKvDecode, every_format_equals_the_double_reference_for_mha_gqa_and_mqa) {
  unsigned long long seed = 600;
  for (const Shape& s : shapes())
    for (const Format& f : formats(s.d)) {
      Rng rng(++seed);
      const Tensor2 q = rng.normal_matrix(s.heads, s.d, 0.0, 2.0);
      const QuantizedKv k = quantize_kv(keys_with_an_outlier_channel(rng, s.kv_heads, s.length, s.d), f.key);
      const QuantizedKv v = quantize_kv(rng.normal_tensor(s.kv_heads, s.length, s.d), f.value);
      const Tensor2 expected = ref::quantized_kv_decode_attention(q, k, v);
      const Tolerance tol = tolerance_of(q, dequantize_kv(k), dequantize_kv(v), s.length);
      for (std::size_t splits : {std::size_t{0}, std::min<std::size_t>(3, s.length)}) {
        const Tensor2 got = quantized_kv_decode_attention_split_k(q, k, v, s.length, std::nullopt, splits);
        EXPECT_TRUE(matches(got, xt::eval(xt::cast<double>(expected)), tol,
                            {label_of(s, f.name) + ", splits " + std::to_string(splits), {"h", "c"}, seed, "",
                             "each block of codes dequantized to x^ = s q (+ z) with its group's scale, then "
                             "o_i = sum_t softmax(scale q_i . k^_t) v^_t over kv head i / (h/g)"}));
      }
    }
}

// A cache of capacity > length whose per-token scales past `length` are NaN: the kernel attends to
// the first `length` positions only, as ref::gqa_decode_attention over the dequantized floats.
TEST(QuantizedKvDecode, attends_to_the_first_length_positions_of_a_longer_cache) {
  const std::size_t capacity = 320;
  unsigned long long seed = 700;
  for (const Shape& s : shapes())
    for (const Format& f : formats(s.d)) {
      Rng rng(++seed);
      const Tensor2 q = rng.normal_matrix(s.heads, s.d, 0.0, 2.0);
      QuantizedKv k = quantize_kv(keys_with_an_outlier_channel(rng, s.kv_heads, capacity, s.d), f.key);
      QuantizedKv v = quantize_kv(rng.normal_tensor(s.kv_heads, capacity, s.d), f.value);
      poison_past(k, s.length);
      poison_past(v, s.length);
      const Tensor3 k_hat = dequantize_kv(k), v_hat = dequantize_kv(v);
      const auto expected = ref::gqa_decode_attention(q, k_hat, v_hat, s.length);
      const Tensor2 got = quantized_kv_decode_attention_split_k(q, k, v, s.length, std::nullopt, 0);
      EXPECT_TRUE(matches(got, xt::eval(xt::cast<double>(expected.out)), tolerance_of(q, k_hat, v_hat, s.length),
                          {label_of(s, f.name) + " of capacity 320", {"h", "c"}, seed, "",
                           "only positions t < length are read (the scales past it are NaN)"}));
    }
}

// The attention error of each format against the float cache (a double oracle over the unquantized
// keys and values) stays within ref::quantized_kv_attention_error_bound, plus the kernel's own
// float rounding (the tolerance above, relative to the exact output).
TEST(QuantizedKvDecode, the_error_against_the_float_cache_stays_within_the_reference_bound) {
  const Shape s{32, 8, 128, 301};
  unsigned long long seed = 800;
  for (const Format& f : formats(s.d)) {
    Rng rng(++seed);
    const Tensor2 q = rng.normal_matrix(s.heads, s.d, 0.0, 0.5);
    const Tensor3 k = keys_with_an_outlier_channel(rng, s.kv_heads, s.length, s.d);
    const Tensor3 v = rng.normal_tensor(s.kv_heads, s.length, s.d);
    const QuantizedKv kq = quantize_kv(k, f.key), vq = quantize_kv(v, f.value);
    const auto exact = ref::gqa_decode_attention(q, k, v, s.length);  // double, rounded to float once
    const Tensor2 got = quantized_kv_decode_attention(q, kq, vq);
    const Tensor2 bound = ref::quantized_kv_attention_error_bound(q, kq, vq);
    const Tolerance rounding = tolerance_of(q, dequantize_kv(kq), dequantize_kv(vq), s.length);
    double worst_error = 0.0, worst_bound = 0.0;
    for (std::size_t i = 0; i < s.heads; ++i)
      for (std::size_t c = 0; c < s.d; ++c) {
        const double error = std::fabs(double{got(i, c)} - exact.out(i, c));
        // + one float rounding of the reference's output (2^-24 relative)
        const double allowed = bound(i, c) + rounding.atol + rounding.rtol * std::fabs(exact.out(i, c)) +
                               std::ldexp(std::fabs(exact.out(i, c)), -24);
        EXPECT_LE(error, allowed) << f.name << " at (head " << i << ", c " << c << ")";
        worst_error = std::max(worst_error, error);
        worst_bound = std::max(worst_bound, double{bound(i, c)});
      }
    ::testing::Test::RecordProperty(std::string(f.name) + ": max error", std::to_string(worst_error));
    ::testing::Test::RecordProperty(std::string(f.name) + ": max bound", std::to_string(worst_bound));
    EXPECT_GT(worst_error, 0.0) << f.name << ": quantization should change the output";
  }
}

// The kernel reads E4M3 codes by moving their bits into a float (no table): every one of the 254
// finite codes, subnormals and both zeros included, must come out as core's e4m3_bits_to_float. With
// all keys 0 the weights are uniform, so each output channel is the mean of its 16 values; channel
// c holds the codes 16c .. 16c + 15, so that each channel's values are of similar size and a
// wrong small value shows (0x7f and 0xff, E4M3's NaN, are replaced by 0x7e and 0xfe).
TEST(QuantizedKvDecode, every_finite_e4m3_code_is_read_as_its_value) {
  const std::size_t d = 16, n = 16;
  QuantizedKv k = quantize_kv(Tensor3::from_shape({1, n, d}) * 0.0f, fp8_e4m3_per_token(d));
  QuantizedKv v = k;
  std::fill(v.scales.begin(), v.scales.end(), 1.0f);
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t c = 0; c < d; ++c) {
      const auto code = static_cast<std::uint8_t>(16 * c + t);
      v.codes[t * d + c] = (code & 0x7f) == 0x7f ? static_cast<std::uint8_t>(code - 1) : code;
    }
  const Tensor2 q = Rng(1).normal_matrix(2, d);
  const Tensor2 got = quantized_kv_decode_attention(q, k, v);
  for (std::size_t c = 0; c < d; ++c) {
    double mean = 0.0, largest = 0.0;
    for (std::size_t t = 0; t < n; ++t) {
      const double value = e4m3_bits_to_float(v.codes[t * d + c]);
      mean += value / n;
      largest = std::max(largest, std::fabs(value));
    }
    // 16 terms summed in float, weights 1/16 exact: reduction_rtol(16) of the largest term.
    for (std::size_t i = 0; i < 2; ++i)
      EXPECT_NEAR(got(i, c), mean, reduction_rtol(n) * largest) << "channel " << c << " (codes " << 16 * c << " .. " << 16 * c + 15 << ")";
  }
}

// INT8 and FP8 E4M3 per token (one scale per token and kv head) are decoded from their codes in
// place, s_t applied to each dot product and folded into each softmax weight
// (optimized/src/detail/code_kernels.hpp); the kernels block four query rows and four keys at a
// time, head_dim in registers of 16 floats and tiles of 64 (AVX-512). Every remainder: groups of
// 1, 3, 4, 6 and 32 query heads per kv head (rows past a multiple of 4); lengths 1, 7, 37 and 515
// (keys past a multiple of 4, 16 and the 512-position block); 1, 2, 3 and 5 splits (ranges
// that begin anywhere); head_dim 16, 80 and 128 (single registers after the tiles of 64) and 40
// (not a whole number of AVX-512 registers: converted into a buffer instead there). The cache
// holds 70 positions more than `length`, with NaN scales there, so that a code read past `length`
// (the prefetches ahead of the rows stop before it) shows; the expected output is the double
// reference over the dequantized cache, to the float tolerance.
TEST(QuantizedKvDecode, int8_and_fp8_per_token_read_in_place_equal_the_reference_at_every_remainder) {
  unsigned long long seed = 1500;
  const std::size_t kv_heads = 2, past = 70;
  for (const bool fp8 : {false, true})
    for (const std::size_t d : {16, 40, 80, 128})
      for (const std::size_t group : {1, 3, 4, 6, 32})
        for (const std::size_t length : {1, 7, 37, 515}) {
          Rng rng(++seed);
          const KvQuantSpec spec = fp8 ? fp8_e4m3_per_token(d) : int8_per_token(d);
          const Tensor2 q = rng.normal_matrix(group * kv_heads, d, 0.0, 2.0);
          QuantizedKv k = quantize_kv(keys_with_an_outlier_channel(rng, kv_heads, length + past, d), spec);
          QuantizedKv v = quantize_kv(rng.normal_tensor(kv_heads, length + past, d), spec);
          poison_past(k, length);
          poison_past(v, length);
          const Tensor3 k_hat = dequantize_kv(k), v_hat = dequantize_kv(v);
          const auto expected = xt::eval(xt::cast<double>(ref::gqa_decode_attention(q, k_hat, v_hat, length).out));
          const Tolerance tol = tolerance_of(q, k_hat, v_hat, length);
          const Shape shape{group * kv_heads, kv_heads, d, length};
          for (const std::size_t splits : {1, 2, 3, 5}) {
            if (splits > length) continue;
            const Tensor2 got = quantized_kv_decode_attention_split_k(q, k, v, length, std::nullopt, splits);
            EXPECT_TRUE(matches(got, expected, tol,
                                {label_of(shape, fp8 ? "fp8 e4m3 per token" : "int8 per token") + ", splits " +
                                     std::to_string(splits),
                                 {"h", "c"}, seed, "",
                                 "o_i = sum_t softmax(scale s_t (q_i . c_t)) s_t c_t: the codes c_t read as numbers, "
                                 "s_t the scale of token t"}));
          }
        }
}

// E4M3's NaN codes (s.1111.111) read in place give NaN where the reference over the dequantized
// cache gives NaN, and only there: a NaN key code makes every score of its kv head's query heads,
// and so their whole outputs, NaN; a NaN value code makes its channel NaN in those heads' outputs.
// At d = 128 (read in place) and d = 40 (converted into a buffer), for both signs of the NaN.
TEST(QuantizedKvDecode, an_e4m3_nan_code_gives_nan_where_the_reference_does) {
  const std::size_t kv_heads = 3, group = 4, length = 45;
  unsigned long long seed = 1600;
  for (const std::size_t d : {128, 40})
    for (const std::uint8_t nan_code : {std::uint8_t{0x7f}, std::uint8_t{0xff}})
      for (const bool in_keys : {true, false}) {
        Rng rng(++seed);
        const Tensor2 q = rng.normal_matrix(group * kv_heads, d);
        QuantizedKv k = quantize_kv(rng.normal_tensor(kv_heads, length, d), fp8_e4m3_per_token(d));
        QuantizedKv v = quantize_kv(rng.normal_tensor(kv_heads, length, d), fp8_e4m3_per_token(d));
        const std::size_t head = 1, position = 38, channel = d - 3;
        (in_keys ? k : v).codes[(head * length + position) * d + channel] = nan_code;
        const Tensor2 expected = ref::quantized_kv_decode_attention(q, k, v);
        const Tensor2 got = quantized_kv_decode_attention(q, k, v);
        const std::string what = std::string(in_keys ? "key" : "value") + " code " + std::to_string(nan_code) +
                                 " at (kv head 1, position 38, channel d - 3), d " + std::to_string(d);
        std::size_t nans = 0;
        for (std::size_t i = 0; i < group * kv_heads; ++i)
          for (std::size_t c = 0; c < d; ++c) {
            const bool nan_expected = i / group == head && (in_keys || c == channel);
            ASSERT_EQ(std::isnan(expected(i, c)), nan_expected)
                << what << ": the reference at (" << i << ", " << c << ")";
            EXPECT_EQ(std::isnan(got(i, c)), nan_expected) << what << ": at (head " << i << ", c " << c << ")";
            nans += std::isnan(got(i, c)) ? 1 : 0;
          }
        EXPECT_EQ(nans, in_keys ? group * d : group) << what;
      }
}

TEST(QuantizedKvDecode, bad_input_is_an_error_naming_the_parameter) {
  const std::size_t h = 8, g = 2, n = 7, d = 6;
  Rng rng(900);
  const Tensor2 q = rng.normal_matrix(h, d);
  const QuantizedKv k = quantize_kv(rng.normal_tensor(g, n, d), int8_per_token(d));
  const QuantizedKv v = quantize_kv(rng.normal_tensor(g, n, d), int8_per_token(d));
  auto decode = [&](const Tensor2& query, const QuantizedKv& keys, const QuantizedKv& values, std::size_t length) {
    return quantized_kv_decode_attention_split_k(query, keys, values, length, std::nullopt, 0);
  };
  EXPECT_TRUE(throws_error_naming([&] { decode(q, k, v, 0); }, {"quantized_kv_decode_attention", "length (0)"}));
  EXPECT_TRUE(throws_error_naming([&] { decode(q, k, v, n + 1); }, {"length (8)", "capacity = 7"}));
  EXPECT_TRUE(throws_error_naming([&] { quantized_kv_decode_attention_split_k(q, k, v, n, std::nullopt, n + 1); }, {"splits (8)"}));
  EXPECT_TRUE(throws_error_naming([&] { quantized_kv_decode_attention_split_k(q, k, v, n, -1.0, 0); }, {"scale"}));
  // Shapes that do not fit together.
  const QuantizedKv v_longer = quantize_kv(rng.normal_tensor(g, n + 1, d), int8_per_token(d));
  EXPECT_TRUE(throws_error_naming([&] { decode(q, k, v_longer, n); }, {"v has shape [2, 8, 6]", "the shape of k"}));
  EXPECT_TRUE(throws_error_naming([&] { decode(rng.normal_matrix(h, d + 2), k, v, n); }, {"k has head_dim 6", "expected 8"}));
  EXPECT_TRUE(throws_error_naming([&] { decode(rng.normal_matrix(7, d), k, v, n); }, {"num_heads (7", "num_kv_heads (2"}));
  Tensor2 q_nan = q;
  q_nan(1, 2) = kNan;
  EXPECT_TRUE(throws_error_naming([&] { decode(q_nan, k, v, n); }, {"q", "non-finite"}));
  // Codes and scales that do not match the shape, an empty tensor.
  QuantizedKv k_short = k;
  k_short.codes.pop_back();
  EXPECT_TRUE(throws_error_naming([&] { decode(q, k_short, v, n); }, {"k has 83 code bytes"}));
  QuantizedKv v_empty = v;
  v_empty.seq = 0;
  EXPECT_TRUE(throws_error_naming([&] { decode(q, k, v_empty, n); }, {"v is empty"}));
  // Specs the kernel does not take: invalid ones, and INT4 over an odd head_dim.
  QuantizedKv k_no_group = k;
  k_no_group.spec.group_size = 0;
  EXPECT_TRUE(throws_error_naming([&] { decode(q, k_no_group, v, n); }, {"spec.group_size"}));
  QuantizedKv v_fp8_asymmetric = quantize_kv(rng.normal_tensor(g, n, d), fp8_e4m3_per_token(d));
  v_fp8_asymmetric.spec.symmetric = false;
  EXPECT_TRUE(throws_error_naming([&] { decode(q, k, v_fp8_asymmetric, n); }, {"spec.symmetric"}));
  const QuantizedKv k_int4_odd = quantize_kv(rng.normal_tensor(g, n, 5), int4_per_group(5));
  const QuantizedKv v_int4_odd = quantize_kv(rng.normal_tensor(g, n, 5), int4_per_group(5));
  EXPECT_TRUE(throws_error_naming([&] { decode(rng.normal_matrix(h, 5), k_int4_odd, v_int4_odd, n); },
                                  {"k has int4 codes and head_dim 5", "even"}));
}

// ------------------------------------------------------------------------------------ bf16 cache

// A cache of capacity > length whose bf16 bits past `length` are NaN: the kernel equals the
// reference (the bf16 values read back exactly, attention in double), output and log-sum-exp.
TEST(Bf16KvDecode, equals_the_double_reference_for_mha_gqa_and_mqa) {
  unsigned long long seed = 1000;
  for (const Shape& s : shapes()) {
    Rng rng(++seed);
    const std::size_t capacity = s.length + 5;
    const Tensor2 q = rng.normal_matrix(s.heads, s.d, 0.0, 2.0);
    Bf16Kv k = to_bf16_kv(keys_with_an_outlier_channel(rng, s.kv_heads, capacity, s.d));
    Bf16Kv v = to_bf16_kv(rng.normal_tensor(s.kv_heads, capacity, s.d + 3));  // d_v != d: padded values
    for (std::size_t h = 0; h < s.kv_heads; ++h)
      for (std::size_t t = s.length; t < capacity; ++t) {
        std::fill_n(k.bits.begin() + (h * capacity + t) * k.head_dim, k.head_dim, float_to_bf16_bits(kNan));
        std::fill_n(v.bits.begin() + (h * capacity + t) * v.head_dim, v.head_dim, float_to_bf16_bits(kNan));
      }
    const auto expected = ref::bf16_kv_decode_attention(q, k, v, s.length);
    const Tolerance tol = tolerance_of(q, from_bf16_kv(k), from_bf16_kv(v), s.length);
    const auto got = bf16_kv_decode_attention(q, k, v, s.length);
    const std::string what = label_of(s, "bf16") + " of capacity " + std::to_string(capacity);
    EXPECT_TRUE(matches(got.out, xt::eval(xt::cast<double>(expected.out)), tol,
                        {what + ": out", {"h", "c"}, seed, "", "x = bf16 bits << 16, exactly; positions >= length NaN"}));
    EXPECT_TRUE(matches(got.lse, xt::eval(xt::cast<double>(expected.lse)), {tol.rtol, tol.rtol},
                        {what + ": lse", {"h"}, seed, "", "L_i = m_i + ln sum_t e^{s_it - m_i}"}));
  }
}

TEST(Bf16KvDecode, bad_input_is_an_error_naming_the_parameter) {
  Rng rng(1100);
  const Tensor2 q = rng.normal_matrix(4, 8);
  const Bf16Kv k = to_bf16_kv(rng.normal_tensor(2, 5, 8)), v = to_bf16_kv(rng.normal_tensor(2, 5, 8));
  Bf16Kv k_short = k;
  k_short.bits.pop_back();
  const Bf16Kv v_other_capacity = to_bf16_kv(rng.normal_tensor(2, 6, 8));
  for (const bool optimized : {true, false}) {
    auto decode = [&](const Bf16Kv& keys, const Bf16Kv& values, std::size_t length) {
      return optimized ? bf16_kv_decode_attention(q, keys, values, length) : ref::bf16_kv_decode_attention(q, keys, values, length);
    };
    const char* which = optimized ? "optimized" : "reference";
    EXPECT_TRUE(throws_error_naming([&] { decode(k_short, v, 5); }, {"k_cache holds 79 values", "needs 80"})) << which;
    EXPECT_TRUE(throws_error_naming([&] { decode(k, v, 0); }, {"length (0)"})) << which;
    EXPECT_TRUE(throws_error_naming([&] { decode(k, v, 6); }, {"length (6)", "capacity = 5"})) << which;
    EXPECT_TRUE(throws_error_naming([&] { decode(k, v_other_capacity, 5); }, {"v_cache", "capacity 6"})) << which;
  }
  EXPECT_TRUE(throws_error_naming([&] { to_bf16_kv(Tensor3::from_shape({2, 0, 8})); }, {"to_bf16_kv", "x"}));
}

// --------------------------------------------------------------------------------- KV layouts

// Laying a cache out per token and back is the identity, and y[t][h] is x[h][t].
TEST(KvLayout, per_token_layout_swaps_heads_and_positions) {
  Rng rng(1200);
  const Tensor3 per_head = rng.normal_tensor(3, 5, 4);
  const Tensor3 per_token = per_token_layout(per_head);
  ASSERT_EQ(per_token.shape()[0], 5u);
  ASSERT_EQ(per_token.shape()[1], 3u);
  for (std::size_t h = 0; h < 3; ++h)
    for (std::size_t t = 0; t < 5; ++t)
      for (std::size_t c = 0; c < 4; ++c) EXPECT_EQ(per_token(t, h, c), per_head(h, t, c));
  EXPECT_TRUE(per_head_layout(per_token) == per_head);
}

// The decode over a per-token cache is the decode over the per-head cache after transposing: the
// same kernel with another row stride, so the same arithmetic in the same order (equal bit for bit
// to gqa_decode_attention_v2 with the same splits), and within the float tolerance of the double
// reference. Positions past `length` are NaN.
TEST(KvLayout, the_per_token_decode_equals_the_per_head_one_after_transposing) {
  unsigned long long seed = 1300;
  for (const Shape& s : shapes())
    for (const std::size_t d_v : {s.d, s.d + 3}) {
      Rng rng(++seed);
      const std::size_t capacity = s.length + 4;
      const Tensor2 q = rng.normal_matrix(s.heads, s.d, 0.0, 2.0);
      Tensor3 k = rng.normal_tensor(s.kv_heads, capacity, s.d), v = rng.normal_tensor(s.kv_heads, capacity, d_v);
      for (std::size_t h = 0; h < s.kv_heads; ++h)
        for (std::size_t t = s.length; t < capacity; ++t) {
          for (std::size_t c = 0; c < s.d; ++c) k(h, t, c) = kNan;
          for (std::size_t c = 0; c < d_v; ++c) v(h, t, c) = kNan;
        }
      const Tensor3 k_tokens = per_token_layout(k), v_tokens = per_token_layout(v);
      const std::string what = label_of(s, "per token") + ", d_v " + std::to_string(d_v);
      for (std::size_t splits : {std::size_t{1}, std::min<std::size_t>(3, s.length)}) {
        const auto per_head = gqa_decode_attention_v2(q, k, v, s.length, std::nullopt, splits);
        const auto per_token = gqa_decode_attention_per_token(q, k_tokens, v_tokens, s.length, std::nullopt, splits);
        EXPECT_TRUE(per_token.out == per_head.out) << what << ", splits " << splits << ": out differs from the per-head decode";
        EXPECT_TRUE(per_token.lse == per_head.lse) << what << ", splits " << splits << ": lse differs from the per-head decode";
      }
      const auto expected = ref::gqa_decode_attention(q, k, v, s.length);
      const auto got = gqa_decode_attention_per_token(q, k_tokens, v_tokens, s.length);
      EXPECT_TRUE(matches(got.out, xt::eval(xt::cast<double>(expected.out)), tolerance_of(q, k, v, s.length),
                          {what, {"h", "c"}, seed, "",
                           "position t of kv head g is row t g + g of the per-token cache, g d floats after row t - 1"}));
    }
}

TEST(KvLayout, bad_input_is_an_error_naming_the_parameter) {
  Rng rng(1400);
  const Tensor2 q = rng.normal_matrix(4, 8);
  const Tensor3 k = rng.normal_tensor(5, 2, 8), v = rng.normal_tensor(5, 2, 8);  // [capacity, g, d]
  EXPECT_TRUE(throws_error_naming([&] { gqa_decode_attention_per_token(q, k, v, 0); }, {"gqa_decode_attention_per_token", "length (0)"}));
  EXPECT_TRUE(throws_error_naming([&] { gqa_decode_attention_per_token(q, k, v, 6); }, {"length (6)", "capacity = 5"}));
  EXPECT_TRUE(throws_error_naming([&] { gqa_decode_attention_per_token(q, k, rng.normal_tensor(6, 2, 8), 5); }, {"v_cache", "capacity 6"}));
  EXPECT_TRUE(throws_error_naming([&] { gqa_decode_attention_per_token(q, k, rng.normal_tensor(5, 3, 8), 5); }, {"v_cache", "kv heads 3"}));
  EXPECT_TRUE(throws_error_naming([&] { gqa_decode_attention_per_token(q, rng.normal_tensor(5, 2, 7), v, 5); }, {"k_cache", "head_dim 7"}));
  EXPECT_TRUE(throws_error_naming([&] { gqa_decode_attention_per_token(q, Tensor3::from_shape({0, 2, 8}), v, 5); }, {"k_cache"}));
  EXPECT_TRUE(throws_error_naming([&] { per_token_layout(Tensor3::from_shape({2, 0, 8})); }, {"per_token_layout"}));
}

}  // namespace
}  // namespace tvlab::opt
