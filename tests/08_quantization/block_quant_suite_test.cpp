// Chapter 08, ggml's block formats over every backend of the registry: the optimized bytes and
// floats are the reference's, bit for bit, on data with outliers, zeros, constant blocks and
// values that fall exactly on rounding ties; the error of each format stays within its step (for
// the K-quants: each value is the nearest on the grid its stored scales give); a dequantized Q8_0,
// Q4_0 or Q5_0 matrix quantizes back to the same bytes; bad input is named. The shapes are
// multiples of 256, the K-quants' super-block.
// The known-answer tests write blocks whose bytes follow from the formats' definitions by hand.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "tvlab/core/dtype.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/block_quant.hpp"

namespace tvlab::quant {
namespace {

using tvlab::testing::throws_error_naming;

// Gaussian rows with a few outliers (x 20), a zero block, a constant block, and a block on
// rounding ties: with x_max = 127 (Q8_0's d = 1) or -8 (Q4_0's d = 1) many x / d are k + 1/2.
Tensor2 hostile_matrix(unsigned long long seed, std::size_t rows, std::size_t cols) {
  Rng rng(seed);
  Tensor2 x = rng.normal_matrix(rows, cols);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c)
      if (rng.uniform() < 0.02) x(r, c) *= 20.0f;
  for (std::size_t c = 0; c < 32; ++c) {
    x(0, c) = 0.0f;                                                      // all zero
    x(1, c) = 3.0f;                                                      // constant
    x(2, c) = c == 0 ? 127.0f : static_cast<float>(c) - 15.5f;           // Q8_0 ties
    if (rows > 3) x(3, c) = c == 0 ? -8.0f : static_cast<float>(c % 16) * 0.5f - 3.5f;  // Q4_0 ties
  }
  // A block where rounding the product x_7 * (1/d) and then the sum with 8.5 gives code 6, and a
  // fused multiply-add (one rounding) gives 5: x_7 / d is -2.5000002 in float, the exact sum
  // 5.99999974 lies nearer 5.9999995 than 6. (Found in the benchmark's 4096 x 4096 weights.)
  if (rows > 4) {
    const float fma_block[32] = {
        0x1.0d72e8p-9f,  0x1.f7db54p-6f,  -0x1.66f15ap-9f, 0x1.c6cbb2p-7f,  -0x1.38d6acp-6f, 0x1.d5a42ap-8f,
        0x1.8fb486p-6f,  -0x1.b27fc8p-7f, 0x1.335eep-8f,   -0x1.c6517ep-7f, 0x1.0f207cp-6f,  -0x1.9e5edcp-7f,
        -0x1.5b996ap-5f, 0x1.017ab6p-7f,  0x1.05baf6p-5f,  0x1.7b025cp-8f,  0x1.3c37a8p-8f,  0x1.fb2bbap-6f,
        0x1.8790fep-6f,  -0x1.e7d904p-7f, -0x1.2c65b4p-6f, 0x1.31f906p-8f,  0x1.75be08p-6f,  -0x1.4ee3bap-7f,
        0x1.2de792p-8f,  0x1.520828p-8f,  0x1.cc9076p-9f,  -0x1.8931aep-6f, -0x1.0ba392p-5f, 0x1.032102p-6f,
        0x1.9183fap-6f,  -0x1.002beep-7f};
    for (std::size_t c = 0; c < 32; ++c) x(4, c) = fma_block[c];
  }
  return x;
}

std::string hex(const std::vector<std::uint8_t>& bytes, std::size_t at, std::size_t count) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (std::size_t i = at; i < at + count && i < bytes.size(); ++i)
    out += std::string{digits[bytes[i] >> 4], digits[bytes[i] & 15], ' '};
  return out;
}

class BlockQuant : public ::testing::TestWithParam<std::tuple<Backend, GgmlType>> {};

std::string label(GgmlType type) { return type_name(type); }

TEST_P(BlockQuant, bytes_and_floats_match_the_reference_bit_for_bit) {
  const auto& [backend, type] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const Tensor2 x = hostile_matrix(801, 9, 768);
  const QuantizedMatrix expected = ref::quantize(x, type);
  const QuantizedMatrix got = backend.quantize(x, type);
  ASSERT_EQ(got.bytes.size(), expected.bytes.size()) << label(type);
  EXPECT_EQ(got.rows, expected.rows);
  EXPECT_EQ(got.cols, expected.cols);
  for (std::size_t i = 0; i < got.bytes.size(); ++i)
    if (got.bytes[i] != expected.bytes[i]) {
      const std::size_t block = i / block_bytes(type);
      ADD_FAILURE() << backend.name << ", " << label(type) << ": byte " << i % block_bytes(type) << " of block "
                    << block << " (row " << block / (x.shape()[1] / block_size(type)) << ") differs.\n  got      "
                    << hex(got.bytes, block * block_bytes(type), block_bytes(type)) << "\n  expected "
                    << hex(expected.bytes, block * block_bytes(type), block_bytes(type))
                    << "\n  the usual cause: a fused multiply-add, or rounding half to even where the format "
                       "rounds half away from zero";
      break;
    }
  const Tensor2 back = backend.dequantize(expected), expected_back = ref::dequantize(expected);
  for (std::size_t i = 0; i < back.size(); ++i)
    if (back.data()[i] != expected_back.data()[i]) {
      ADD_FAILURE() << backend.name << ", " << label(type) << ": dequantized element " << i << " is "
                    << back.data()[i] << ", the reference's " << expected_back.data()[i];
      break;
    }
}

// The K-quants' scales come out of a search (a weighted least-squares fit per sub-block over trial
// grids), so no closed form bounds the step from the data; what the format does promise is its
// last step: the codes are rounded on the grid that the stored numbers give. Read back from the
// bytes (the layouts of core/ggml_blocks.hpp, decoded here independently of the library), a
// sub-block's grid is {step q - offset}: Q4_K and Q5_K step = d s_j, offset = dmin m_j, q in [0, 15]
// and [0, 31]; Q2_K the same with 4-bit codes and q in [0, 3]; Q6_K step = d s_j, offset = 0,
// q in [-32, 31]; Q3_K step = d (s_j - 32), q in [-4, 3]. Each x^ must be the grid point nearest to x:
// |x - x^| <= the distance from x to the grid (at most step / 2 inside it) + float rounding of
// (x + offset) / step and of the decode, a few units of 2^-24 of |x| + |offset| + 63 |step|.
void expect_nearest_on_the_stored_grid(const Backend& backend, const Tensor2& x, const QuantizedMatrix& q,
                                       const Tensor2& back) {
  const bool sub_of_32 = q.type == GgmlType::q4_K || q.type == GgmlType::q5_K;
  const std::size_t sub = sub_of_32 ? 32 : 16, supers = q.cols / 256;
  int lo = 0, hi = 3;  // Q2_K
  if (q.type == GgmlType::q4_K) hi = 15;
  if (q.type == GgmlType::q5_K) hi = 31;
  if (q.type == GgmlType::q6_K) lo = -32, hi = 31;
  if (q.type == GgmlType::q3_K) lo = -4, hi = 3;
  for (std::size_t r = 0; r < q.rows; ++r)
    for (std::size_t s = 0; s < supers; ++s) {
      const std::uint8_t* blk = q.row(r) + s * block_bytes(q.type);
      auto half = [](const std::uint8_t* p) { return static_cast<double>(fp16_bits_to_float(static_cast<std::uint16_t>(p[0] | p[1] << 8))); };
      for (std::size_t j = 0; j < 256 / sub; ++j) {
        double step = 0.0, offset = 0.0;
        if (sub_of_32) {
          const std::uint8_t* sc = blk + 4;  // 6-bit codes: j < 4 in bytes j, j + 4; else split
          const int s_j = j < 4 ? sc[j] & 63 : (sc[j + 4] & 15) | (sc[j - 4] >> 6) << 4;
          const int m_j = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | (sc[j] >> 6) << 4;
          step = half(blk) * s_j, offset = half(blk + 2) * m_j;
        } else if (q.type == GgmlType::q2_K) {  // byte j: s_j | m_j << 4; d, dmin at bytes 80, 82
          step = half(blk + 80) * (blk[j] & 15), offset = half(blk + 82) * (blk[j] >> 4);
        } else if (q.type == GgmlType::q3_K) {  // 6-bit s_j: low 4 bits, then 2 bits of byte 8 + j % 4
          const std::uint8_t* sc = blk + 96;
          const int low = j < 8 ? sc[j] & 15 : sc[j - 8] >> 4;
          step = half(blk + 108) * ((low | ((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32);
        } else {
          step = half(blk + 208) * static_cast<std::int8_t>(blk[192 + j]);
        }
        for (std::size_t i = 0; i < sub; ++i) {
          const std::size_t c = s * 256 + j * sub + i;
          const double v = x(r, c);
          double nearest = INFINITY;
          for (int k = lo; k <= hi; ++k) nearest = std::min(nearest, std::fabs(v - (step * k - offset)));
          const double slack = 8.0 * 0x1p-24 * (std::fabs(v) + std::fabs(offset) + 63.0 * std::fabs(step));
          const double err = std::fabs(v - back(r, c));
          if (err > nearest + slack) {
            ADD_FAILURE() << backend.name << ", " << label(q.type) << ": |x - x^| = " << err << " at (row " << r
                          << ", col " << c << "), x = " << v << ", x^ = " << back(r, c) << ", but the grid of sub-block "
                          << j << " (step " << step << ", offset " << offset << ") has a point " << nearest
                          << " away: the codes must be rounded on the stored scales, not the fitted ones";
            return;
          }
        }
      }
    }
}

// |x - x^| within the format's step. With the float scale d of the block (recomputed here in double
// from the definitions), a code is the nearest one, so the error is at most |d| / 2, except at the
// symmetric types' clamp (x / d up to 2^(b-1), one step beyond the largest code: error up to |d|); storing d
// and m in fp16 adds |d - d16| |q| + |m - m16|. Float rounding of x / d adds a few units of 1e-7.
TEST_P(BlockQuant, the_error_stays_within_the_step_and_the_fp16_rounding) {
  const auto& [backend, type] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const Tensor2 x = hostile_matrix(802, 6, 512);
  const QuantizedMatrix q = backend.quantize(x, type);
  const Tensor2 back = backend.dequantize(q);
  if (is_k_quant(type)) {
    expect_nearest_on_the_stored_grid(backend, x, q, back);
    return;
  }
  const bool symmetric = type == GgmlType::q8_0 || type == GgmlType::q4_0 || type == GgmlType::q5_0;
  const int bits = type == GgmlType::q8_0 ? 8 : (type == GgmlType::q5_0 || type == GgmlType::q5_1) ? 5 : 4;
  for (std::size_t r = 0; r < x.shape()[0]; ++r)
    for (std::size_t b = 0; b < x.shape()[1] / 32; ++b) {
      double lo = INFINITY, hi = -INFINITY, amax = 0.0, x_max = 0.0;
      for (std::size_t j = 0; j < 32; ++j) {
        const double v = x(r, b * 32 + j);
        lo = std::min(lo, v), hi = std::max(hi, v);
        if (std::fabs(v) > amax) amax = std::fabs(v), x_max = v;
      }
      double d = 0.0, m = 0.0, largest_code = 0.0;
      if (type == GgmlType::q8_0) d = amax / 127.0, largest_code = 127.0;
      else if (symmetric) d = x_max / -std::ldexp(1.0, bits - 1), largest_code = std::ldexp(1.0, bits - 1);
      else d = (hi - lo) / (std::ldexp(1.0, bits) - 1.0), m = lo, largest_code = std::ldexp(1.0, bits) - 1.0;
      const double d16 = round_to_fp16(static_cast<float>(d)), m16 = round_to_fp16(static_cast<float>(m));
      const double storage = std::fabs(d - d16) * largest_code + std::fabs(m - m16);
      for (std::size_t j = 0; j < 32; ++j) {
        const double v = x(r, b * 32 + j);
        // the symmetric 4- and 5-bit codes stop one step short of +2^(b-1): from x / d = 2^(b-1) - 1/2
        // on, the code is the largest, 2^(b-1) - 1, at most one step away
        const bool clamped = symmetric && type != GgmlType::q8_0 && v / d >= std::ldexp(1.0, bits - 1) - 0.5 - 1e-6;
        const double bound = (clamped ? 1.0 : 0.5) * std::fabs(d) * (1.0 + 1e-5) + storage + 1e-6 * amax;
        const double err = std::fabs(v - back(r, b * 32 + j));
        if (err > bound) {
          ADD_FAILURE() << backend.name << ", " << label(type) << ": |x - x^| = " << err << " at (row " << r
                        << ", col " << b * 32 + j << "), x = " << v << ", beyond " << bound << " (block scale d = " << d
                        << ", fp16 d = " << d16 << ")";
          return;
        }
      }
    }
}

// quantize(dequantize(q)) == q: the dequantized block has the same largest magnitude, d * 127 or
// d * -8 (-16), which gives back the same fp16 d and every code exactly. Not so for the "_1" types:
// their m is stored rounded, and (15 d + m) - m need not give back 15 d in float.
TEST_P(BlockQuant, a_dequantized_symmetric_matrix_quantizes_to_the_same_bytes) {
  const auto& [backend, type] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  if (type == GgmlType::q4_1 || type == GgmlType::q5_1) GTEST_SKIP() << "asymmetric: not a fixed point (see above)";
  if (is_k_quant(type))
    GTEST_SKIP() << "K-quant: its scales come from a search over trial grids, which need not find the same scales "
                    "for the dequantized values; no fixed point is claimed";
  const QuantizedMatrix q = backend.quantize(hostile_matrix(803, 5, 256), type);
  const QuantizedMatrix again = backend.quantize(backend.dequantize(q), type);
  EXPECT_TRUE(again.bytes == q.bytes) << backend.name << ", " << label(type)
                                      << ": re-quantizing the dequantized matrix changed its bytes";
}

TEST_P(BlockQuant, zero_blocks_give_zeros_and_bits_per_weight_are_the_formats) {
  const auto& [backend, type] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const Tensor2 zeros = xt::zeros<float>({std::size_t{2}, 2 * block_size(type)});
  const QuantizedMatrix q = backend.quantize(zeros, type);
  EXPECT_EQ(q.bytes.size(), 2 * 2 * block_bytes(type));
  EXPECT_DOUBLE_EQ(8.0 * static_cast<double>(q.bytes.size()) / static_cast<double>(zeros.size()),
                   bits_per_weight(type));
  const Tensor2 back = backend.dequantize(q);
  for (float v : back) ASSERT_EQ(v, 0.0f) << backend.name << ", " << label(type) << ": a zero block decodes to " << v;
}

TEST_P(BlockQuant, bad_input_is_named) {
  const auto& [backend, type] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const std::size_t n = block_size(type);
  EXPECT_TRUE(throws_error_naming([&] { backend.quantize(Tensor2::from_shape({2, 48}), type); },
                                  {"quantize", "row length (48)", "block of " + std::to_string(n)}));
  EXPECT_TRUE(throws_error_naming([&] { backend.quantize(Tensor2::from_shape({0, n}), type); }, {"quantize", "x"}));
  Tensor2 x = xt::zeros<float>({std::size_t{2}, n});
  x(1, 5) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { backend.quantize(x, type); }, {"quantize", "x", "non-finite"}));
  x(1, 5) = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws_error_naming([&] { backend.quantize(x, type); }, {"quantize", "x", "non-finite"}));
  // the largest value whose fp16 scale is finite is accepted, the next float beyond is not
  x(1, 5) = static_cast<float>(ref::largest_quantizable(type));
  EXPECT_NO_THROW(backend.quantize(x, type));
  const Tensor2 back = backend.dequantize(backend.quantize(x, type));
  EXPECT_TRUE(std::isfinite(back(1, 5))) << "the largest quantizable value came back as " << back(1, 5);
  x(1, 5) = std::nextafter(x(1, 5), INFINITY);
  EXPECT_TRUE(throws_error_naming([&] { backend.quantize(x, type); }, {"quantize", "(row 1, col 5)", "65504"}));
  QuantizedMatrix q = ref::quantize(xt::zeros<float>({std::size_t{2}, n}), type);
  q.bytes.pop_back();
  EXPECT_TRUE(throws_error_naming([&] { backend.dequantize(q); }, {"dequantize", "q.bytes", "expected"}));
  q.bytes.push_back(0);
  q.type = static_cast<GgmlType>(5);  // Q4_2, removed from ggml
  EXPECT_TRUE(throws_error_naming([&] { backend.dequantize(q); }, {"dequantize", "q.type (5)"}));
}

INSTANTIATE_TEST_SUITE_P(
    Ch08, BlockQuant,
    ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::quantize)),
                       ::testing::ValuesIn(quantized_types())),
    [](const ::testing::TestParamInfo<std::tuple<Backend, GgmlType>>& info) {
      return std::get<0>(info.param).name + "_" + type_name(std::get<1>(info.param));
    });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(BlockQuant);

// ------------------------------------------------------------------ known answers, by hand

// Q8_0 with max|x| = 127: d = 1, stored as fp16 1.0 = 0x3C00 (bytes 00 3C, little-endian); each
// code is x rounded half away from zero: 63.5 -> 64, -63.5 -> -64 (0xC0), 0.49 -> 0, 2.5 -> 3.
std::vector<std::uint8_t> q8_0_by_hand(std::vector<float>& x) {
  x.assign(32, 0.0f);
  x[0] = 127.0f, x[1] = -127.0f, x[2] = 63.5f, x[3] = -63.5f, x[4] = 0.49f, x[5] = 2.5f, x[6] = -2.5f, x[7] = 100.2f;
  std::vector<std::uint8_t> bytes(34, 0);
  bytes[0] = 0x00, bytes[1] = 0x3C;
  const int codes[8] = {127, -127, 64, -64, 0, 3, -3, 100};
  for (int j = 0; j < 8; ++j) bytes[2 + j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(codes[j]));
  return bytes;
}

// Q4_0 with x_max = -8 (the element of largest magnitude is negative): d = -8 / -8 = 1, fp16 0x3C00;
// code = min(15, trunc(x + 8.5)): -8 -> 0, 7 -> 15, 7.9 -> 15 (16.4 clamped), 0.5 -> 9, -0.5 -> 8,
// 0 -> 8; byte j holds code j (low nibble) and code j + 16 (high nibble).
std::vector<std::uint8_t> q4_0_by_hand(std::vector<float>& x) {
  x.assign(32, 0.0f);
  x[0] = -8.0f, x[1] = 7.0f, x[2] = 7.9f, x[3] = 0.5f, x[16] = -0.5f, x[17] = -7.6f, x[18] = 3.2f;
  int codes[32];
  for (int& c : codes) c = 8;
  codes[0] = 0, codes[1] = 15, codes[2] = 15, codes[3] = 9, codes[16] = 8, codes[17] = 0, codes[18] = 11;
  std::vector<std::uint8_t> bytes(18, 0);
  bytes[0] = 0x00, bytes[1] = 0x3C;
  for (int j = 0; j < 16; ++j) bytes[2 + j] = static_cast<std::uint8_t>(codes[j] | codes[j + 16] << 4);
  return bytes;
}

class KnownBlocks : public ::testing::TestWithParam<Backend> {};

TEST_P(KnownBlocks, q8_0_block_by_hand) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "08.1");
  std::vector<float> x;
  const std::vector<std::uint8_t> expected = q8_0_by_hand(x);
  std::vector<std::uint8_t> got(34, 0xAA);  // pre-filled: a byte never written shows
  backend.quantize_block_q8_0(x.data(), got.data());
  EXPECT_EQ(hex(got, 0, 34), hex(expected, 0, 34))
      << backend.name << ": d = max|x| / 127 = 1 is fp16 0x3C00 (bytes 00 3c); codes round(x / d), half away from zero";
}

TEST_P(KnownBlocks, q4_0_block_by_hand) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "08.2");
  std::vector<float> x;
  const std::vector<std::uint8_t> expected = q4_0_by_hand(x);
  std::vector<std::uint8_t> got(18, 0xAA);
  backend.quantize_block_q4_0(x.data(), got.data());
  EXPECT_EQ(hex(got, 0, 18), hex(expected, 0, 18))
      << backend.name << ": d = x_max / -8 = 1; codes min(15, trunc(x / d + 8.5)); byte j = code j | code (j + 16) << 4";
}

// The block functions against the reference's whole-matrix quantize on random blocks (for the
// student: the reference is the oracle).
TEST_P(KnownBlocks, random_blocks_match_the_reference) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, backend.quantize_block_q8_0 ? "08.1" : "08.2");
  const Tensor2 x = hostile_matrix(804, 8, 32);
  for (GgmlType type : {GgmlType::q8_0, GgmlType::q4_0}) {
    const QuantizedMatrix expected = ref::quantize(x, type);
    const auto& fn = type == GgmlType::q8_0 ? backend.quantize_block_q8_0 : backend.quantize_block_q4_0;
    for (std::size_t r = 0; r < 8; ++r) {
      std::vector<std::uint8_t> got(block_bytes(type), 0xAA);
      fn(&x(r, 0), got.data());
      const std::vector<std::uint8_t> want(expected.row(r), expected.row(r) + block_bytes(type));
      EXPECT_EQ(hex(got, 0, got.size()), hex(want, 0, want.size()))
          << backend.name << ", " << type_name(type) << ", row " << r << " of the hostile blocks";
    }
  }
}

// Both block functions are provided together (the reference's and the student's).
INSTANTIATE_TEST_SUITE_P(Ch08, KnownBlocks,
                         ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::quantize_block_q8_0)),
                         tvlab::testing::ImplName());

// The whole-matrix functions of every backend: the block types only, and the hand-computed bytes.
class MatrixQuant : public ::testing::TestWithParam<Backend> {};

TEST_P(MatrixQuant, a_block_type_is_required) {
  const Backend& backend = GetParam();
  EXPECT_TRUE(throws_error_naming(
      [&] { backend.quantize(xt::zeros<float>({std::size_t{1}, std::size_t{32}}), GgmlType::f16); },
      {"quantize", "type (F16)", "not a block type"}));
}

TEST_P(MatrixQuant, quantize_gives_the_hand_computed_blocks) {
  const Backend& backend = GetParam();
  std::vector<float> x;
  std::vector<std::uint8_t> expected = q8_0_by_hand(x);
  Tensor2 row = Tensor2::from_shape({1, 32});
  std::copy(x.begin(), x.end(), row.begin());
  EXPECT_EQ(hex(backend.quantize(row, GgmlType::q8_0).bytes, 0, 34), hex(expected, 0, 34)) << backend.name;
  expected = q4_0_by_hand(x);
  std::copy(x.begin(), x.end(), row.begin());
  EXPECT_EQ(hex(backend.quantize(row, GgmlType::q4_0).bytes, 0, 18), hex(expected, 0, 18)) << backend.name;
}

INSTANTIATE_TEST_SUITE_P(Ch08, MatrixQuant,
                         ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::quantize)),
                         tvlab::testing::ImplName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(MatrixQuant);

}  // namespace
}  // namespace tvlab::quant
