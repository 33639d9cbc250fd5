// Chapter 08, ggml's K-quants Q2_K to Q6_K: bytes and values held to those of ggml's own code,
// llama.cpp's own test data and thresholds (tests/test-quantize-fns.cpp), the error against the 32-weight formats on the lesson's data,
// all-zero and tiny super-blocks, a tie rounded half to even, and blocks encoded and decoded by
// hand from the layouts of core/ggml_blocks.hpp.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "../common/testing.hpp"
#include "backends.hpp"
#include "tvlab/analysis/quant_error.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/block_quant.hpp"

namespace tvlab::quant {
namespace {

using tvlab::testing::throws_error_naming;

const GgmlType kKQuants[] = {GgmlType::q2_K, GgmlType::q3_K, GgmlType::q4_K, GgmlType::q5_K, GgmlType::q6_K};

// test-quantize-fns's metric: sqrt(sum of squared differences) / n, in double, the root taken in
// float (`sqrtf(sum) / n`). It is the RMSE divided by sqrt(n): for n = 4096, RMSE / 64.
float array_rmse(const float* a, const float* b, std::size_t n) {
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double diff = static_cast<double>(a[i]) - b[i];
    sum += diff * diff;
  }
  return std::sqrt(static_cast<float>(sum)) / static_cast<float>(n);
}

double rmse(const Tensor2& x, const Tensor2& y) {
  double sum = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double diff = static_cast<double>(x.data()[i]) - y.data()[i];
    sum += diff * diff;
  }
  return std::sqrt(sum / static_cast<double>(x.size()));
}

// test-quantize-fns's data: 0.1 + 2 cos(i + offset) for i < 4096, the sum taken in double (0.1 is
// a double there), the cosine in float.
Tensor2 test_quantize_fns_data(float offset) {
  const std::size_t n = 32 * 128;
  Tensor2 x = Tensor2::from_shape({1, n});
  for (std::size_t i = 0; i < n; ++i) x(0, i) = static_cast<float>(0.1 + 2.0f * std::cos(static_cast<float>(i) + offset));
  return x;
}

// llama.cpp's thresholds for these types: MAX_QUANTIZATION_TOTAL_ERROR = 0.002 and, between the
// CPU quantizer and the reference one, MAX_QUANTIZATION_REFERENCE_ERROR = 0.0001 (here the two
// agree bit for bit, so that difference is 0). The values themselves: ggml's code, transcribed
// and compiled with gcc -O2 -ffp-contract=off, printed 0.000982 (Q4_K) and 0.000261 (Q6_K) with
// %f, so they lie within 5e-7 of these; and 0.001121 (Q4_0), 0.000591 (Q5_0), 0.000074 (Q8_0).
TEST(Ch08KQuant, llama_cpp_test_data_stays_within_its_thresholds) {
  const Tensor2 x = test_quantize_fns_data(0.0f);
  const std::map<GgmlType, float> printed = {{GgmlType::q4_K, 0.000982f}, {GgmlType::q6_K, 0.000261f},
                                             {GgmlType::q4_0, 0.001121f}, {GgmlType::q5_0, 0.000591f},
                                             {GgmlType::q8_0, 0.000074f}};
  for (const Backend& backend : backends()) {
    if (!backend.quantize) continue;
    for (const auto& [type, expected] : printed) {
      const Tensor2 back = backend.dequantize(backend.quantize(x, type));
      const float total = array_rmse(x.data(), back.data(), x.size());
      EXPECT_LT(total, 0.002f) << backend.name << ", " << type_name(type) << ": total quantization error";
      EXPECT_NEAR(total, expected, 5e-7) << backend.name << ", " << type_name(type)
                                         << ": ggml's code gives " << expected << " on this data";
      const Tensor2 reference = ref::dequantize(ref::quantize(x, type));
      const float against_reference = array_rmse(back.data(), reference.data(), x.size());
      EXPECT_LT(against_reference, 0.0001f) << backend.name << ", " << type_name(type);
      EXPECT_EQ(against_reference, 0.0f) << backend.name << ", " << type_name(type) << ": not the reference's values";
    }
  }
}

// Golden bytes and values from ggml's own code: scripts/ggml_quants_check.sh compiles ggml's
// ggml-quants.c (ggml 0.15.3) with a program that builds the two data sets below (the same integer
// generator, exact in float on every machine), runs quantize_row_*_ref and dequantize_row_* on
// them, and prints the FNV-1a hashes of the bytes and of the float32 values; it checks that each
// of its hashes appears in this file. One float operation taken in another order inside a scale
// search (say w (l x) for (w l) x) changes them.
std::uint32_t lcg_state = 0;
float lcg_uniform() {  // 24 random bits in [0, 1)
  lcg_state = lcg_state * 1664525u + 1013904223u;
  return static_cast<float>(lcg_state >> 8) * 0x1p-24f;
}

// "golden": a million weights, sums of 4 uniforms minus 2, 1% of them x 20, every fifth super-block
// rounded to quarters (many codes on ties), every seventh scaled by 1e-3.
std::vector<float> golden_data() {
  std::vector<float> x(256 * 4096);
  lcg_state = 2024;
  for (std::size_t i = 0; i < x.size(); ++i) {
    float v = lcg_uniform() + lcg_uniform() + lcg_uniform() + lcg_uniform() - 2.0f;
    if (lcg_uniform() < 0.01f) v *= 20.0f;
    if ((i / 256) % 5 == 3) v = static_cast<float>(static_cast<int>(v * 8.0f)) * 0.25f;
    x[i] = v * ((i / 256) % 7 == 2 ? 1e-3f : 1.0f);
  }
  return x;
}

// "edges": 64 super-blocks, super-block s of kind s % 16: all zero, tiny (1e-30: every fp16 scale 0),
// large (up to 6e4), one sub-block of 16 among zeros, one spike, all positive, constant negative,
// constant positive, eighths (ties), sub-blocks of 1e-2 ... 1e2, 5% outliers x 50, 90% zeros, 1e-4
// (fp16 scales subnormal), 1e-7 (fp16 scales 0 or the smallest), plain, alternating 100 and 0.001.
std::vector<float> edge_data() {
  const float decades[5] = {1e-2f, 1e-1f, 1.0f, 1e1f, 1e2f};
  std::vector<float> x(256 * 64);
  lcg_state = 808;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t s = i / 256, e = i % 256;
    const float a = lcg_uniform(), b = lcg_uniform(), c = lcg_uniform(), d = lcg_uniform();
    const float v = a + b + c + d - 2.0f;
    float out = 0.0f;
    switch (s % 16) {
      case 0: out = 0.0f; break;
      case 1: out = v * 1e-30f; break;
      case 2: out = v * 3e4f; break;
      case 3: out = e / 16 == 5 ? v : 0.0f; break;
      case 4: out = e == 77 ? 40.0f : v * 0.01f; break;
      case 5: out = v + 3.0f; break;
      case 6: out = -2.5f; break;
      case 7: out = 1.75f; break;
      case 8: out = static_cast<float>(static_cast<int>(v * 16.0f)) * 0.125f; break;
      case 9: out = v * decades[(e / 32) % 5]; break;
      case 10: out = lcg_uniform() < 0.05f ? v * 50.0f : v; break;
      case 11: out = lcg_uniform() < 0.9f ? 0.0f : v; break;
      case 12: out = v * 1e-4f; break;
      case 13: out = v * 1e-7f; break;
      case 14: out = v; break;
      case 15: out = e % 2 ? v * 100.0f : v * 0.001f; break;
    }
    x[i] = out;
  }
  return x;
}

std::uint64_t fnv1a(const std::uint8_t* bytes, std::size_t n) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return h;
}

struct GgmlHashes {
  GgmlType type;
  std::uint64_t bytes, values;  // of quantize_row_*_ref's bytes, of dequantize_row_*'s float32 values
};

// scripts/ggml_quants_check.sh --print
const std::vector<GgmlHashes> kGolden = {
    {GgmlType::q8_0, 0x43211c746559b1c2ull, 0x3394cfd07222b2adull},
    {GgmlType::q4_0, 0x4aa63160c2bb050cull, 0x85df81cdd9c89376ull},
    {GgmlType::q4_1, 0xb24979c8f54b8c47ull, 0xcbfa11cff734f0c5ull},
    {GgmlType::q5_0, 0x955f2e3aa1b212a4ull, 0x5e579180e0e11e1aull},
    {GgmlType::q5_1, 0x7039e284a4f53f7eull, 0x1eb9ceec5a929240ull},
    {GgmlType::q2_K, 0x64900e28aebcd793ull, 0x5002e6759e153cd8ull},
    {GgmlType::q3_K, 0x86b7e4347f09f93bull, 0x75a452cecc36adbeull},
    {GgmlType::q4_K, 0x2bc5b02ec8baa72eull, 0x25922a5af31900d2ull},
    {GgmlType::q5_K, 0x26f82c51f974a632ull, 0x26fd0b1c659fbe5eull},
    {GgmlType::q6_K, 0x9f22841ca728440dull, 0x8d7d875e30579757ull},
};
const std::vector<GgmlHashes> kEdges = {
    {GgmlType::q8_0, 0x00392a2cbe4ac97cull, 0xc793b3240675a496ull},
    {GgmlType::q4_0, 0xf22b689debed4caeull, 0xff731cff65ecb502ull},
    {GgmlType::q4_1, 0xa0894ce40980f949ull, 0xd6df8ac85eb27d5dull},
    {GgmlType::q5_0, 0x7d932908323b2b76ull, 0x13e6dac5f6f3bd08ull},
    {GgmlType::q5_1, 0x03cd5f87c3ffa3dcull, 0x31afba047cc3cb0dull},
    {GgmlType::q2_K, 0x43a95be610a92fedull, 0xc4d98e666d0adefdull},
    {GgmlType::q3_K, 0x47b00438896b6965ull, 0x8037fca4e61fb186ull},
    {GgmlType::q4_K, 0x29feb44107544821ull, 0x357c9d49768dfafaull},
    {GgmlType::q5_K, 0x67d9a901fea8c590ull, 0xb33bba6763b0df4bull},
    {GgmlType::q6_K, 0xe08601f8aec87862ull, 0x4422743b080ada57ull},
};

void expect_ggmls_hashes(const char* name, const std::vector<float>& data, std::size_t cols,
                         const std::vector<GgmlHashes>& hashes) {
  Tensor2 x = Tensor2::from_shape({data.size() / cols, cols});
  std::copy(data.begin(), data.end(), x.begin());
  for (const Backend& backend : backends()) {
    if (!backend.quantize) continue;
    for (const GgmlHashes& h : hashes) {
      const QuantizedMatrix q = backend.quantize(x, h.type);
      EXPECT_EQ(fnv1a(q.bytes.data(), q.bytes.size()), h.bytes)
          << name << ", " << backend.name << ", " << h.type << ": not ggml's bytes; the usual cause is a float "
          << "operation in another order than ggml's, or a fused multiply-add";
      const Tensor2 back = backend.dequantize(q);
      EXPECT_EQ(fnv1a(reinterpret_cast<const std::uint8_t*>(back.data()), back.size() * sizeof(float)), h.values)
          << name << ", " << backend.name << ", " << h.type << ": not the values of ggml's dequantize_row_*";
    }
  }
}

TEST(Ch08KQuant, bytes_and_values_are_ggmls_on_a_million_weights) {
  expect_ggmls_hashes("golden", golden_data(), 1024, kGolden);
}

TEST(Ch08KQuant, bytes_and_values_are_ggmls_on_zero_tiny_large_and_constant_blocks) {
  expect_ggmls_hashes("edges", edge_data(), 1024, kEdges);
}

// The lesson's data (walkthrough's table_data): 256 x 1024 weights N(0, 1), seed 808, and the same
// with 1% multiplied by 20. Measured RMSE (ref; this test prints them, with the largest errors):
//   format (bits):  Q8_0 (8.5)  Q6_K (6.56)  Q5_1 (6)  Q5_K (5.5)  Q5_0 (5.5)  Q4_K (4.5)  Q4_1 (5)  Q4_0 (4.5)  Q3_K (3.44)  Q2_K (2.63)
//   N(0, 1):        5.38e-3     1.78e-2      3.80e-2   3.63e-2     4.29e-2     7.17e-2     7.85e-2   8.64e-2     1.52e-1      2.98e-1
//   1% outliers:    2.41e-2     6.95e-2      1.13e-1   1.09e-1     1.86e-1     2.12e-1     2.36e-1   3.14e-1     3.30e-1      5.68e-1
// So Q6_K beats Q5_0 and Q5_1 with about as many bits, and Q4_K beats Q4_0 with the same 4.5 bits
// and Q4_1 with fewer; only Q8_0, with two more bits, does better than Q6_K. Among the K-quants
// each bit of code roughly halves the RMSE (Q2_K to Q6_K: 2.98e-1, 1.52e-1, 7.17e-2, 3.63e-2,
// 1.78e-2 on N(0, 1)). The margins (at least 9% of the larger RMSE) are far beyond any
// float-rounding effect.
TEST(Ch08KQuant, k_quants_beat_the_32_weight_formats_of_their_size) {
  for (bool outliers : {false, true}) {
    const Tensor2 x = analysis::lesson_weights(outliers);
    std::map<GgmlType, double> e;
    std::cout << "[ numbers  ] " << (outliers ? "1% outliers x 20" : "N(0, 1)") << ", RMSE (max error):";
    for (GgmlType type : quantized_types()) {
      const Tensor2 back = ref::dequantize(ref::quantize(x, type));
      e[type] = rmse(x, back);
      double worst = 0.0;
      for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(double(x.data()[i]) - back.data()[i]));
      std::cout << ' ' << type_name(type) << ' ' << std::setprecision(3) << e[type] << " (" << worst << ")";
    }
    std::cout << '\n';
    const std::string data = outliers ? " (1% outliers)" : " (N(0, 1))";
    EXPECT_LT(e[GgmlType::q6_K], e[GgmlType::q4_K]) << data;
    EXPECT_LT(e[GgmlType::q6_K], e[GgmlType::q5_0]) << data;
    EXPECT_LT(e[GgmlType::q6_K], e[GgmlType::q5_1]) << data;
    EXPECT_LT(e[GgmlType::q4_K], e[GgmlType::q4_0]) << data;
    EXPECT_LT(e[GgmlType::q4_K], e[GgmlType::q4_1]) << data;
    EXPECT_LT(e[GgmlType::q8_0], e[GgmlType::q6_K]) << data;
    // and among the K-quants, each bit of code buys accuracy
    EXPECT_LT(e[GgmlType::q6_K], e[GgmlType::q5_K]) << data;
    EXPECT_LT(e[GgmlType::q5_K], e[GgmlType::q4_K]) << data;
    EXPECT_LT(e[GgmlType::q4_K], e[GgmlType::q3_K]) << data;
    EXPECT_LT(e[GgmlType::q3_K], e[GgmlType::q2_K]) << data;
  }
}

// An all-zero super-block: every code, scale and super-scale 0, so every value 0 (Q6_K's decode,
// d s (q - 32) = 0 * (-32), may give -0, which equals 0). Tiny values (fp16 underflows the
// super-block scale to 0) and one non-zero sub-block among zeros must not give NaN either.
TEST(Ch08KQuant, zero_and_tiny_super_blocks_give_finite_values) {
  Tensor2 x = xt::zeros<float>({std::size_t{4}, std::size_t{512}});
  for (std::size_t c = 0; c < 512; ++c) {
    x(1, c) = 1e-30f * static_cast<float>(c % 7) - 3e-30f;  // far below fp16's smallest step
    x(3, c) = -2.0f;                                          // constant and negative
  }
  for (std::size_t c = 256 + 48; c < 256 + 64; ++c) x(2, c) = 5.0f;  // one sub-block (of 16, and half of one of 32)
  for (const Backend& backend : backends()) {
    if (!backend.quantize) continue;
    for (GgmlType type : kKQuants) {
      const QuantizedMatrix q = backend.quantize(x, type);
      for (std::size_t i = 0; i < block_bytes(type); ++i)
        ASSERT_EQ(q.bytes[i], 0) << backend.name << ", " << type_name(type) << ": byte " << i << " of a zero super-block";
      const Tensor2 back = backend.dequantize(q);
      for (std::size_t r = 0; r < 4; ++r)
        for (std::size_t c = 0; c < 512; ++c) {
          ASSERT_TRUE(std::isfinite(back(r, c))) << backend.name << ", " << type_name(type) << " at (" << r << ", " << c << ")";
          if (r == 0 || (r == 2 && (c < 256 + 48 || c >= 256 + 64))) {
            ASSERT_EQ(back(r, c), 0.0f) << backend.name << ", " << type_name(type) << " at (" << r << ", " << c << ")";
          }
          if (r == 1) {
            ASSERT_LE(std::fabs(back(r, c)), 1e-29f) << backend.name << ", " << type_name(type);
          }
        }
      // the 5s and the constant -2 come back up to the fp16 rounding of the scales (relative 2^-11)
      EXPECT_NEAR(back(2, 256 + 50), 5.0f, 5.0 * 0x1p-10) << type_name(type);
      EXPECT_NEAR(back(3, 7), -2.0f, 2.0 * 0x1p-11) << type_name(type) << ": -2 up to the fp16 rounding of its scale";
    }
  }
}

// ------------------------------------------------------------------ by hand

// A Q4_K block written from the layout: d = 1 (fp16 0x3C00, bytes 00 3c), dmin = 0.5 (0x3800),
// scale codes s = {1, 2, 3, 63, 16, 33, 47, 5}, min codes m = {0, 4, 10, 20, 17, 62, 1, 32}:
//   bytes 0-3:  s_j | (s_{j+4} >> 4) << 6 = 1|1<<6, 2|2<<6, 3|2<<6, 63|0 = 41 82 83 3f
//   bytes 4-7:  m_j | (m_{j+4} >> 4) << 6 = 0|1<<6, 4|3<<6, 10|0, 20|2<<6 = 40 c4 0a 94
//   bytes 8-11: (s_{j+4} & 15) | (m_{j+4} & 15) << 4 = 0|1<<4, 1|14<<4, 15|1<<4, 5|0 = 10 e1 1f 05
// and every nibble byte l of run c = (l % 16) | (15 - l % 16) << 4: sub-block 2c (low halves) has
// q = l % 16, sub-block 2c + 1 (high halves) q = 15 - l % 16. x^ = d s_j q - dmin m_j.
TEST(Ch08KQuant, a_q4_k_block_decodes_by_hand) {
  std::vector<std::uint8_t> block = {0x00, 0x3c, 0x00, 0x38, 0x41, 0x82, 0x83, 0x3f, 0x40, 0xc4,
                                     0x0a, 0x94, 0x10, 0xe1, 0x1f, 0x05};
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) block.push_back(static_cast<std::uint8_t>((l % 16) | (15 - l % 16) << 4));
  ASSERT_EQ(block.size(), block_bytes(GgmlType::q4_K));
  std::vector<float> y(256, NAN);
  ref::dequantize_block(GgmlType::q4_K, block.data(), y.data());
  // element: sub-block j = e / 32, l = e % 32
  EXPECT_EQ(y[0], 0.0f);      // j 0: 1 * 1 * 0 - 0.5 * 0
  EXPECT_EQ(y[5], 5.0f);      // j 0: 1 * 1 * 5
  EXPECT_EQ(y[32], 28.0f);    // j 1: 2 * 15 - 0.5 * 4
  EXPECT_EQ(y[100], 683.0f);  // j 3, l 4: 63 * 11 - 0.5 * 20
  EXPECT_EQ(y[128], -8.5f);   // j 4: 16 * 0 - 0.5 * 17
  EXPECT_EQ(y[170], 134.0f);  // j 5, l 10: 33 * 5 - 0.5 * 62
  EXPECT_EQ(y[200], 375.5f);  // j 6, l 8: 47 * 8 - 0.5 * 1
  EXPECT_EQ(y[255], -16.0f);  // j 7, l 31: 5 * 0 - 0.5 * 32
  const int s[8] = {1, 2, 3, 63, 16, 33, 47, 5}, m[8] = {0, 4, 10, 20, 17, 62, 1, 32};
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32, l = e % 32, q = j % 2 == 0 ? l % 16 : 15 - l % 16;
    ASSERT_EQ(y[e], 1.0 * s[j] * q - 0.5 * m[j]) << "element " << e;
  }
  // the whole-matrix functions read the same bytes
  const QuantizedMatrix qm{GgmlType::q4_K, 1, 256, block};
  for (const Backend& backend : backends()) {
    if (backend.dequantize && backend.kind != BackendKind::cuda) {  // CUDA: the 32-weight formats only
      EXPECT_TRUE(std::equal(y.begin(), y.end(), backend.dequantize(qm).begin())) << backend.name;
    }
  }
}

// A Q6_K block written from the layout: d = 0.25 (fp16 0x3400, bytes 208-209 = 00 34), int8 scale
// codes s_j at bytes 192 + j, and every code 0 (x^ = 0.25 s_j (0 - 32) = -8 s_j) except:
//   ql[0] = 5a: element 0's low bits 10, element 64's 5;  qh[0] = e4 = 11 10 01 00: high pairs of
//   elements 0, 32, 64, 96 = 0, 1, 2, 3;  ql[97] = f3 (half 1, byte 32 + 1): element 161's low 3,
//   element 225's 15;  qh[33] = c4 = 11 00 01 00: element 161's high pair 1, element 225's 3.
TEST(Ch08KQuant, a_q6_k_block_decodes_by_hand) {
  const int s[16] = {1, -1, 2, -2, 3, 4, 5, 127, -128, 10, 0, 7, 8, 9, 11, 12};
  std::vector<std::uint8_t> block(210, 0);
  for (int j = 0; j < 16; ++j) block[192 + j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(s[j]));
  block[208] = 0x00, block[209] = 0x34;
  block[0] = 0x5a, block[128] = 0xe4, block[64 + 33] = 0xf3, block[128 + 33] = 0xc4;
  std::vector<float> y(256, NAN);
  ref::dequantize_block(GgmlType::q6_K, block.data(), y.data());
  EXPECT_EQ(y[0], -5.5f);     // code 10: 0.25 * 1 * (10 - 32)
  EXPECT_EQ(y[17], 8.0f);     // code 0, sub-block 1: 0.25 * -1 * -32
  EXPECT_EQ(y[32], -8.0f);    // code 0 | 1 << 4 = 16, sub-block 2: 0.25 * 2 * -16
  EXPECT_EQ(y[64], 3.75f);    // code 5 | 2 << 4 = 37, sub-block 4: 0.25 * 3 * 5
  EXPECT_EQ(y[96], 20.0f);    // code 0 | 3 << 4 = 48, sub-block 6: 0.25 * 5 * 16
  EXPECT_EQ(y[129], 1024.0f); // code 0, sub-block 8: 0.25 * -128 * -32
  EXPECT_EQ(y[161], 0.0f);    // code 3 | 1 << 4 = 19, sub-block 10, whose scale is 0
  EXPECT_EQ(y[225], 85.25f);  // code 15 | 3 << 4 = 63, sub-block 14: 0.25 * 11 * 31
  EXPECT_EQ(y[255], -96.0f);  // code 0, sub-block 15: 0.25 * 12 * -32
  std::vector<int> code(256, 0);
  code[0] = 10, code[32] = 16, code[64] = 37, code[96] = 48, code[161] = 19, code[225] = 63;
  for (int e = 0; e < 256; ++e) ASSERT_EQ(y[e], 0.25 * s[e / 16] * (code[e] - 32)) << "element " << e;
  const QuantizedMatrix qm{GgmlType::q6_K, 1, 256, block};
  for (const Backend& backend : backends()) {
    if (backend.dequantize && backend.kind != BackendKind::cuda) {  // CUDA: the 32-weight formats only
      EXPECT_TRUE(std::equal(y.begin(), y.end(), backend.dequantize(qm).begin())) << backend.name;
    }
  }
}

// Q4_K encoded by hand: every sub-block is 0, 1, ..., 15 twice. Its fit is exact (min 0, scale 1,
// error 0, which no trial grid beats), so every scale is 1: max_scale = 1, s_j = 63, and no min
// (m_j = 0, dmin = 0). d = fp16(1 / 63): 1/63 = 2^-6 * 1.01587, mantissa 0.01587 * 1024 = 16.25 ->
// 16, fp16 0x2400 | 16 = 0x2410 = 0.015869140625 (bytes 10 24). The grid step d * 63 =
// 0.999755859375 puts each x back on its code (15 / step = 15.004 -> 15). Scale bytes: 0-3 =
// 63 | (63 >> 4) << 6 = ff, 4-7 = 0, 8-11 = 63 & 15 = 0f; nibble byte l = (l % 16) * 0x11.
TEST(Ch08KQuant, a_q4_k_block_encodes_by_hand) {
  Tensor2 x = Tensor2::from_shape({1, 256});
  for (std::size_t e = 0; e < 256; ++e) x(0, e) = static_cast<float>(e % 16);
  std::vector<std::uint8_t> expected = {0x10, 0x24, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00,
                                        0x00, 0x00, 0x0f, 0x0f, 0x0f, 0x0f};
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) expected.push_back(static_cast<std::uint8_t>((l % 16) * 0x11));
  for (const Backend& backend : backends()) {
    if (!backend.quantize) continue;
    const QuantizedMatrix q = backend.quantize(x, GgmlType::q4_K);
    EXPECT_EQ(q.bytes, expected) << backend.name;
    const Tensor2 back = backend.dequantize(q);
    for (std::size_t e = 0; e < 256; ++e)
      ASSERT_EQ(back(0, e), 0.999755859375f * static_cast<float>(e % 16)) << backend.name << ", element " << e;
  }
}

// Q6_K encoded by hand: integers in [-31, 31], each sub-block of 16 led by -32. Each sub-block's
// fit is exact (x_max = -32 gives iscale = 1, l = x, scale 1; no trial grid fits better), so
// d = fp16(1 / -128) = -2^-7 (0xa000, bytes 00 a0), every s_j = round(-128 * 1) = -128 (byte 80),
// the step d s_j = 1, and every x comes back exactly. Code x + 32 splits as in the layout.
TEST(Ch08KQuant, a_q6_k_block_encodes_by_hand) {
  Tensor2 x = Tensor2::from_shape({1, 256});
  for (std::size_t e = 0; e < 256; ++e) x(0, e) = e % 16 == 0 ? -32.0f : static_cast<float>(static_cast<int>(e * 37 % 63) - 31);
  std::vector<std::uint8_t> expected(210, 0);
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t l = 0; l < 32; ++l) {
      auto code = [&](std::size_t k) { return static_cast<int>(x(0, 128 * h + l + 32 * k)) + 32; };  // k-th group
      expected[64 * h + l] = static_cast<std::uint8_t>((code(0) & 15) | (code(2) & 15) << 4);
      expected[64 * h + 32 + l] = static_cast<std::uint8_t>((code(1) & 15) | (code(3) & 15) << 4);
      expected[128 + 32 * h + l] =
          static_cast<std::uint8_t>(code(0) >> 4 | (code(1) >> 4) << 2 | (code(2) >> 4) << 4 | (code(3) >> 4) << 6);
    }
  for (int j = 0; j < 16; ++j) expected[192 + j] = 0x80;
  expected[208] = 0x00, expected[209] = 0xa0;
  for (const Backend& backend : backends()) {
    if (!backend.quantize) continue;
    const QuantizedMatrix q = backend.quantize(x, GgmlType::q6_K);
    EXPECT_EQ(q.bytes, expected) << backend.name;
    const Tensor2 back = backend.dequantize(q);
    for (std::size_t e = 0; e < 256; ++e) ASSERT_EQ(back(0, e), x(0, e)) << backend.name << ", element " << e;
  }
}

// The K-quants round half to even (ggml's nearest_int), unlike Q8_0 (half away from zero): in the
// block above, with step 1, put 2.5 and -3.5 in the last sub-block. Its fit still chooses the grid
// of step 1 (the weights x^2 make the -32 dominate), so the final codes are round(2.5) = 2 and
// round(-3.5) = -4; half away from zero would give 3 and -4, rounding up 3 and -3.
TEST(Ch08KQuant, ties_round_half_to_even) {
  Tensor2 x = Tensor2::from_shape({1, 256});
  for (std::size_t e = 0; e < 256; ++e) x(0, e) = e % 16 == 0 ? -32.0f : static_cast<float>(static_cast<int>(e * 37 % 63) - 31);
  x(0, 250) = 2.5f, x(0, 251) = -3.5f;
  for (const Backend& backend : backends()) {
    if (!backend.quantize) continue;
    const Tensor2 back = backend.dequantize(backend.quantize(x, GgmlType::q6_K));
    EXPECT_EQ(back(0, 250), 2.0f) << backend.name << ": 2.5 rounds to the even 2";
    EXPECT_EQ(back(0, 251), -4.0f) << backend.name << ": -3.5 rounds to the even -4";
    EXPECT_EQ(back(0, 249), x(0, 249)) << backend.name;
  }
}

TEST(Ch08KQuant, bad_input_is_named) {
  for (GgmlType type : kKQuants) {
    EXPECT_TRUE(throws_error_naming([&] { ref::quantize(Tensor2::from_shape({1, 128}), type); },
                                    {"quantize", "row length (128)", type_name(type) + "'s block of 256"}));
    QuantizedMatrix q{type, 1, 256, std::vector<std::uint8_t>(block_bytes(type) - 1)};
    EXPECT_TRUE(throws_error_naming([&] { ref::dequantize(q); }, {"dequantize", "q.bytes", "expected"}));
    q = QuantizedMatrix{type, 1, 32, {}};
    EXPECT_TRUE(throws_error_naming([&] { ref::dequantize(q); }, {"dequantize", "q.cols (32)", "block of 256"}));
  }
  std::vector<float> x(256, 0.0f);
  std::vector<std::uint8_t> out(256);
  EXPECT_TRUE(throws_error_naming([&] { ref::quantize_block(GgmlType::f16, x.data(), out.data()); },
                                  {"quantize_block", "type (F16)"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::dequantize_block(GgmlType::f32, out.data(), x.data()); },
                                  {"dequantize_block", "type (F32)"}));
  EXPECT_EQ(type_from_name("test", "q6_k"), GgmlType::q6_K);
  EXPECT_EQ(type_from_name("test", "Q4_K"), GgmlType::q4_K);
  EXPECT_EQ(type_from_name("test", "q5_k"), GgmlType::q5_K);
  EXPECT_EQ(type_from_name("test", "Q3_K"), GgmlType::q3_K);
  EXPECT_EQ(type_from_name("test", "q2_K"), GgmlType::q2_K);
  for (std::uint32_t number = 10; number <= 14; ++number) EXPECT_TRUE(is_known_type(number)) << number;
  EXPECT_FALSE(is_known_type(9));   // Q8_1: ggml's activation format, not stored in files here
  EXPECT_FALSE(is_known_type(15));  // Q8_K: likewise
  // bits per weight from ggml-common.h's block structs: (2 + 2 + 16 + 64) * 8 / 256 and so on
  EXPECT_EQ(bits_per_weight(GgmlType::q2_K), 2.625);
  EXPECT_EQ(bits_per_weight(GgmlType::q3_K), 3.4375);
  EXPECT_EQ(bits_per_weight(GgmlType::q4_K), 4.5);
  EXPECT_EQ(bits_per_weight(GgmlType::q5_K), 5.5);
  EXPECT_EQ(bits_per_weight(GgmlType::q6_K), 6.5625);
  for (GgmlType type : kKQuants) EXPECT_EQ(block_size(type), 256u) << type;
  EXPECT_TRUE(throws_error_naming([&] { ref::quantize(Tensor2::from_shape({1, 256}), GgmlType::f32); },
                                  {"quantize", "type (F32)", "Q2_K"}));
}

}  // namespace
}  // namespace tvlab::quant
