#include "tvlab/opt/quantized_gemv.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/ref/quantized_gemv.hpp"

// Compiled with -ffp-contract=off and without the precompiled header (optimized/CMakeLists.txt):
// each per-block term and each addition is rounded on its own, as in the reference.

namespace tvlab::opt {
namespace {

constexpr std::size_t kBlock = 32;
constexpr std::size_t kGroup = 8;  // blocks reduced together
constexpr std::size_t kRows = 4;   // rows whose sums run side by side
constexpr std::size_t kSuper = 256;  // Q4_K's super-block
constexpr std::size_t kSubBlocks = kSuper / kBlock;

#if defined(__AVX512VNNI__) && defined(__AVX512F__)
#define TVLAB_Q4_0_PAIRS 1  // Q4_0 two blocks per 512-bit vpdpbusd (q4_0_pair_lanes)
constexpr bool kQ4_0Pairs = true;
#else
constexpr bool kQ4_0Pairs = false;
#endif

// The activations, unpacked once per call: codes, scales as floats, and each block's code sum
// (Q4_0's sumi = sum_j q_j x_j - 8 sum_j x_j).
struct Activations {
  std::vector<std::int8_t> codes;
  // Q4_0's order for two blocks in one 512-bit register (see q4_0_pair_lanes): for blocks k, k + 1
  // (k even), x_k[0..15], x_{k+1}[0..15], x_k[16..31], x_{k+1}[16..31]
  std::vector<std::int8_t> paired;
  std::vector<float> scales;
  std::vector<std::int32_t> sums;
  // `pairs`: also the paired order (Q4_0 on AVX-512 VNNI, the only user)
  Activations(const Tensor1& x, bool pairs) {
    const std::vector<std::uint8_t> blocks = ref::quantize_activations_q8_0(x);
    const std::size_t n = x.size() / kBlock, bytes = block_bytes(GgmlType::q8_0);
    // padded to a whole group of blocks: the last group's loads stay inside, its extra terms unused
    const std::size_t padded = (n + kGroup - 1) / kGroup * kGroup;
    codes.assign(padded * kBlock, 0);
    scales.assign(padded, 0.0f);
    sums.assign(padded, 0);
    for (std::size_t b = 0; b < n; ++b) {
      scales[b] = read_fp16(blocks.data() + b * bytes);
      std::int32_t s = 0;
      for (std::size_t j = 0; j < kBlock; ++j) s += codes[b * kBlock + j] = static_cast<std::int8_t>(blocks[b * bytes + 2 + j]);
      sums[b] = s;
    }
    if (!pairs) return;
    paired.assign(padded * kBlock, 0);
    for (std::size_t k = 0; k < padded; k += 2)
      for (std::size_t j = 0; j < kBlock / 2; ++j) {
        paired[k * kBlock + j] = codes[k * kBlock + j];
        paired[k * kBlock + 16 + j] = codes[(k + 1) * kBlock + j];
        paired[k * kBlock + 32 + j] = codes[k * kBlock + 16 + j];
        paired[k * kBlock + 48 + j] = codes[(k + 1) * kBlock + 16 + j];
      }
  }
};

#if defined(__AVX2__)
// Eight int32 lanes whose total is the block's integer dot (Q4_0: before subtracting 8 sum x).
inline __m256i block_lanes(GgmlType type, const std::uint8_t* wb, const std::int8_t* x) {
  const __m256i xs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  __m256i w_unsigned, x_signed;
  if (type == GgmlType::q8_0) {
    // the byte products take an unsigned left factor: |w|, with w's sign moved onto x
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 2));
    w_unsigned = _mm256_sign_epi8(w, w);
    x_signed = _mm256_sign_epi8(xs, w);
  } else {
    // nibbles: element j in the low half of byte j, element j + 16 in the high half; codes 0..15
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 2));
    const __m128i low_mask = _mm_set1_epi8(0x0F);
    const __m128i low = _mm_and_si128(packed, low_mask), high = _mm_and_si128(_mm_srli_epi16(packed, 4), low_mask);
    w_unsigned = _mm256_set_m128i(high, low);
    x_signed = xs;
  }
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w_unsigned, x_signed);  // 4 byte products per lane
#else
  // pairs of byte products as int16 (at most 2 * 127 * 128, no saturation), then pairs of those
  const __m256i pairs = _mm256_maddubs_epi16(w_unsigned, x_signed);
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
#endif
}

// [total of v[0], ..., total of v[7]]: horizontal adds within 128-bit halves, then the halves added.
inline __m256i totals_of_eight(const __m256i* v) {
  const __m256i ab = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i cd = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  const __m128i first = _mm_add_epi32(_mm256_castsi256_si128(ab), _mm256_extracti128_si256(ab, 1));
  const __m128i second = _mm_add_epi32(_mm256_castsi256_si128(cd), _mm256_extracti128_si256(cd, 1));
  return _mm256_set_m128i(second, first);
}
#endif

#if defined(TVLAB_Q4_0_PAIRS)
// Q4_0, two blocks in one 512-bit register: the nibbles of blocks k and k + 1 unpacked to
// [low of k, low of k + 1, high of k, high of k + 1] (16 codes each), against the activations in the
// same order (Activations::paired), one vpdpbusd for 64 byte products. Returns 8 lanes: the first 4
// sum to block k's dot, the last 4 to block k + 1's.
inline __m256i q4_0_pair_lanes(const std::uint8_t* block_k, const std::uint8_t* block_k1, const std::int8_t* x_pair) {
  const __m256i packed = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block_k1 + 2)),
                                          _mm_loadu_si128(reinterpret_cast<const __m128i*>(block_k + 2)));
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  const __m256i low = _mm256_and_si256(packed, low_mask);
  const __m256i high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_mask);
  const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
  const __m512i lanes = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, _mm512_loadu_si512(x_pair));
  return _mm256_add_epi32(_mm512_castsi512_si256(lanes), _mm512_extracti64x4_epi64(lanes, 1));
}

// [total of block k, k + 1, ..., k + 7] from four pairs' lanes: three horizontal adds leave the
// totals in the order k, k + 2, k + 4, k + 6, k + 1, k + 3, k + 5, k + 7; one permutation sorts them.
inline __m256i totals_of_four_pairs(const __m256i* pairs) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(pairs[0], pairs[1]), _mm256_hadd_epi32(pairs[2], pairs[3]));
  return _mm256_permutevar8x32_epi32(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
#endif

// The float term of every block of one row, in block order, with the reference's roundings:
// sumi (d_w d_x) for Q8_0, (sumi d_w) d_x for Q4_0. Eight blocks at a time; the last group is
// padded with zero lanes and only its real terms are stored.
void block_terms(GgmlType type, const std::uint8_t* row, std::size_t blocks, const Activations& a, float* terms) {
  const std::size_t w_bytes = block_bytes(type);
#if defined(__AVX2__)
  for (std::size_t b = 0; b < blocks; b += kGroup) {
    const std::size_t count = std::min(kGroup, blocks - b);
    // the eight fp16 scales d_w straight into one register (16-bit inserts: eight narrow stores to
    // memory read back as one vector would stall the load that waits for them)
    __m128i d_w_bits = _mm_setzero_si128();
    const auto scale_bits = [&](std::size_t k) {
      std::uint16_t bits = 0;
      if (k < count) std::memcpy(&bits, row + (b + k) * w_bytes, 2);  // fp16, little-endian
      return static_cast<int>(bits);
    };
    d_w_bits = _mm_insert_epi16(d_w_bits, scale_bits(0), 0);
    d_w_bits = _mm_insert_epi16(d_w_bits, scale_bits(1), 1);
    d_w_bits = _mm_insert_epi16(d_w_bits, scale_bits(2), 2);
    d_w_bits = _mm_insert_epi16(d_w_bits, scale_bits(3), 3);
    d_w_bits = _mm_insert_epi16(d_w_bits, scale_bits(4), 4);
    d_w_bits = _mm_insert_epi16(d_w_bits, scale_bits(5), 5);
    d_w_bits = _mm_insert_epi16(d_w_bits, scale_bits(6), 6);
    d_w_bits = _mm_insert_epi16(d_w_bits, scale_bits(7), 7);
    __m256i sumi;
#if defined(TVLAB_Q4_0_PAIRS)
    if (type == GgmlType::q4_0) {
      static const std::uint8_t kZeroBlock[18] = {};  // past the row's last block: its activations are 0
      __m256i pairs[kGroup / 2];
      for (std::size_t p = 0; p < kGroup / 2; ++p) {
        const std::size_t k = b + 2 * p;
        pairs[p] = k < b + count ? q4_0_pair_lanes(row + k * w_bytes, k + 1 < b + count ? row + (k + 1) * w_bytes : kZeroBlock,
                                                   a.paired.data() + k * kBlock)
                                 : _mm256_setzero_si256();
      }
      sumi = totals_of_four_pairs(pairs);
    } else
#endif
    {
      __m256i lanes[kGroup];
      for (std::size_t k = 0; k < kGroup; ++k)
        lanes[k] = k < count ? block_lanes(type, row + (b + k) * w_bytes, a.codes.data() + (b + k) * kBlock)
                             : _mm256_setzero_si256();
      sumi = totals_of_eight(lanes);
    }
    if (type == GgmlType::q4_0)  // sum_j (q_j - 8) x_j = sum_j q_j x_j - 8 sum_j x_j
      sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.sums.data() + b)), 3));
    const __m256 sumi_f = _mm256_cvtepi32_ps(sumi);  // exact: |sumi| < 2^24
    const __m256 d_w = _mm256_cvtph_ps(d_w_bits);
    const __m256 d_x = _mm256_loadu_ps(a.scales.data() + b);
    const __m256 term = type == GgmlType::q8_0 ? _mm256_mul_ps(sumi_f, _mm256_mul_ps(d_w, d_x))
                                               : _mm256_mul_ps(_mm256_mul_ps(sumi_f, d_w), d_x);
    _mm256_storeu_ps(terms + b, term);  // the buffer is padded: a short last group writes past `blocks`
  }
#else
  // Without AVX2: the integer dot in plain C++. (Not used where AVX2 is: GCC 12, allowed AVX-512
  // VNNI, vectorises a signed-by-signed byte dot with vpdpbusd, an unsigned-by-signed instruction,
  // and gets Q8_0 wrong.)
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::uint8_t* wb = row + b * w_bytes;
    const std::int8_t* x = a.codes.data() + b * kBlock;
    std::int32_t s = 0;
    if (type == GgmlType::q8_0) {
      for (std::size_t j = 0; j < kBlock; ++j) s += static_cast<std::int8_t>(wb[2 + j]) * x[j];
    } else {
      for (std::size_t j = 0; j < kBlock / 2; ++j) s += (wb[2 + j] & 0x0F) * x[j] + (wb[2 + j] >> 4) * x[j + kBlock / 2];
      s -= 8 * a.sums[b];
    }
    const float sumi = static_cast<float>(s), d_w = read_fp16(wb), d_x = a.scales[b];
    terms[b] = type == GgmlType::q8_0 ? sumi * (d_w * d_x) : sumi * d_w * d_x;
  }
#endif
}


// Q4_K's activations (Q8_K), unpacked once per call: the codes, d_x as floats, and the code sums of
// each sub-block of 32 (bsums in pairs) as int16, the super-block count padded to a group of eight.
struct KActivations {
  std::vector<std::int8_t> codes;
  std::vector<float> scales;
  std::vector<std::int16_t> sub_sums;  // [super-block][8]
  explicit KActivations(const Tensor1& x) {
    const std::vector<std::uint8_t> blocks = ref::quantize_activations_q8_k(x);
    const std::size_t n = x.size() / kSuper, padded = (n + kGroup - 1) / kGroup * kGroup;
    codes.assign(padded * kSuper, 0);
    scales.assign(padded, 0.0f);
    sub_sums.assign(padded * kSubBlocks, 0);
    for (std::size_t b = 0; b < n; ++b) {
      const std::uint8_t* block = blocks.data() + b * ref::kQ8KBlockBytes;
      std::uint32_t bits = 0;
      for (std::size_t i = 0; i < 4; ++i) bits |= static_cast<std::uint32_t>(block[i]) << (8 * i);
      std::memcpy(&scales[b], &bits, 4);
      std::memcpy(codes.data() + b * kSuper, block + 4, kSuper);
      // a sub-block's code sum from the block's own sums of 16 (bsums, little-endian int16)
      const auto bsum = [&](std::size_t g) {
        return static_cast<std::int16_t>(block[4 + kSuper + 2 * g] | (block[4 + kSuper + 2 * g + 1] << 8));
      };
      for (std::size_t j = 0; j < kSubBlocks; ++j)
        sub_sums[b * kSubBlocks + j] = static_cast<std::int16_t>(bsum(2 * j) + bsum(2 * j + 1));
    }
  }
};

// Q4_K's 12 bytes of 6-bit codes as [s_0 .. s_7, m_0 .. m_7] in one register, by 32-bit masks and
// shifts (ggml's utmp steps) instead of the reference's byte-by-byte q4_k_scale_min: bytes 0..3 hold
// the low 6 bits of s_0..s_3 (top 2 bits: of s_4..s_7), bytes 4..7 those of m_0..m_3, bytes 8..11
// the low nibbles of s_4..s_7 and, in their high nibbles, those of m_4..m_7.
inline void q4_k_scales_and_mins(const std::uint8_t* packed, std::uint32_t out[4]) {
  std::uint32_t a, b, c;
  std::memcpy(&a, packed, 4);
  std::memcpy(&b, packed + 4, 4);
  std::memcpy(&c, packed + 8, 4);
  constexpr std::uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
  out[0] = a & low6;                                    // s_0..s_3
  out[1] = (c & low4) | (((a >> 6) & low2) << 4);       // s_4..s_7
  out[2] = b & low6;                                    // m_0..m_3
  out[3] = ((c >> 4) & low4) | (((b >> 6) & low2) << 4);  // m_4..m_7
}

#if defined(__AVX2__)
// One Q4_K super-block against its activations: eight int32 lanes that sum to S = sum_j s_j dot_j,
// and eight whose sum is M = sum_j m_j sum_{l in j} x_l. The nibbles of run r (32 bytes) are
// sub-blocks 2r (low halves) and 2r + 1 (high halves); each sub-block's 32 byte products become 16
// int16 pair sums (vpmaddubsw, at most 2 * 15 * 127) that are multiplied by s_j and added in pairs
// into int32 (vpmaddwd: AVX-512 VNNI's vpdpwssd does both in one).
inline void q4_k_lanes(const std::uint8_t* wb, const std::int8_t* x, const std::int16_t* sub_sums, __m256i& s_lanes,
                       __m256i& m_lanes) {
  std::uint32_t codes[4];
  q4_k_scales_and_mins(wb + 4, codes);
  const __m128i packed_codes = _mm_setr_epi32(static_cast<int>(codes[0]), static_cast<int>(codes[1]),
                                              static_cast<int>(codes[2]), static_cast<int>(codes[3]));
  const __m128i mins = _mm_cvtepu8_epi16(_mm_srli_si128(packed_codes, 8));
  // M's lanes: m_j x-sums in pairs (vpmaddwd), in the low half
  m_lanes = _mm256_castsi128_si256(_mm_madd_epi16(mins, _mm_loadu_si128(reinterpret_cast<const __m128i*>(sub_sums))));
  m_lanes = _mm256_inserti128_si256(m_lanes, _mm_setzero_si128(), 1);
  const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(packed_codes));  // s_0..s_7, twice
  const __m256i low_mask = _mm256_set1_epi8(0x0F);
  __m256i acc = _mm256_setzero_si256();
  for (std::size_t r = 0; r < kSubBlocks / 2; ++r) {
    const __m256i run = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 16 + 32 * r));
    const __m256i q[2] = {_mm256_and_si256(run, low_mask), _mm256_and_si256(_mm256_srli_epi16(run, 4), low_mask)};
    for (std::size_t h = 0; h < 2; ++h) {
      const std::size_t j = 2 * r + h;
      // s_j in every int16 lane: bytes 2j and 2j + 1 of each 128-bit half
      const __m256i s_j = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<short>((2 * j) | ((2 * j + 1) << 8))));
      const __m256i pairs = _mm256_maddubs_epi16(q[h], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + kBlock * j)));
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
      acc = _mm256_dpwssd_epi32(acc, pairs, s_j);
#else
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, s_j));
#endif
    }
  }
  s_lanes = acc;
}
#endif

// The two float terms of every super-block of one Q4_K row, with the reference's roundings:
// plus[b] = (d d_x) S and minus[b] = (dmin d_x) M. Eight super-blocks at a time, their S and M
// reduced together; a short last group is padded with zero lanes.
void q4_k_terms(const std::uint8_t* row, std::size_t supers, const KActivations& a, float* plus, float* minus) {
  const std::size_t w_bytes = block_bytes(GgmlType::q4_K);
#if defined(__AVX2__)
  for (std::size_t b = 0; b < supers; b += kGroup) {
    const std::size_t count = std::min(kGroup, supers - b);
    __m256i s_lanes[kGroup], m_lanes[kGroup];
    __m128i d_bits = _mm_setzero_si128(), dmin_bits = _mm_setzero_si128();
    for (std::size_t k = 0; k < kGroup; ++k) {
      if (k >= count) {
        s_lanes[k] = m_lanes[k] = _mm256_setzero_si256();
        continue;
      }
      const std::uint8_t* wb = row + (b + k) * w_bytes;
      q4_k_lanes(wb, a.codes.data() + (b + k) * kSuper, a.sub_sums.data() + (b + k) * kSubBlocks, s_lanes[k], m_lanes[k]);
    }
    // d and dmin (fp16) of the eight super-blocks, inserted from registers (see block_terms)
    const auto fp16_bits = [&](std::size_t k, std::size_t offset) {
      std::uint16_t bits = 0;
      if (k < count) std::memcpy(&bits, row + (b + k) * w_bytes + offset, 2);
      return static_cast<int>(bits);
    };
#define TVLAB_INSERT_SCALES(k)                                  \
  d_bits = _mm_insert_epi16(d_bits, fp16_bits(k, 0), k); \
  dmin_bits = _mm_insert_epi16(dmin_bits, fp16_bits(k, 2), k)
    TVLAB_INSERT_SCALES(0);
    TVLAB_INSERT_SCALES(1);
    TVLAB_INSERT_SCALES(2);
    TVLAB_INSERT_SCALES(3);
    TVLAB_INSERT_SCALES(4);
    TVLAB_INSERT_SCALES(5);
    TVLAB_INSERT_SCALES(6);
    TVLAB_INSERT_SCALES(7);
#undef TVLAB_INSERT_SCALES
    const __m256 s = _mm256_cvtepi32_ps(totals_of_eight(s_lanes));  // one rounding, as the reference's
    const __m256 m = _mm256_cvtepi32_ps(totals_of_eight(m_lanes));  // exact: |M| < 2^24
    const __m256 d_x = _mm256_loadu_ps(a.scales.data() + b);
    _mm256_storeu_ps(plus + b, _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtph_ps(d_bits), d_x), s));
    _mm256_storeu_ps(minus + b, _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtph_ps(dmin_bits), d_x), m));
  }
#else
  for (std::size_t b = 0; b < supers; ++b) {
    const std::uint8_t* wb = row + b * w_bytes;
    const std::int8_t* x = a.codes.data() + b * kSuper;
    std::uint32_t packed[4];
    q4_k_scales_and_mins(wb + 4, packed);
    std::uint8_t codes[16];
    for (std::size_t i = 0; i < 16; ++i) codes[i] = static_cast<std::uint8_t>(packed[i / 4] >> (8 * (i % 4)));
    std::int32_t s = 0, m = 0;
    for (std::size_t j = 0; j < kSubBlocks; ++j) {
      const std::uint8_t* run = wb + 16 + 32 * (j / 2);
      std::int32_t dot = 0;
      for (std::size_t l = 0; l < kBlock; ++l) dot += (j % 2 == 0 ? run[l] & 0x0F : run[l] >> 4) * x[kBlock * j + l];
      s += codes[j] * dot;
      m += codes[8 + j] * a.sub_sums[b * kSubBlocks + j];
    }
    const float d_x = a.scales[b];
    plus[b] = read_fp16(wb) * d_x * static_cast<float>(s);
    minus[b] = read_fp16(wb + 2) * d_x * static_cast<float>(m);
  }
#endif
}

Tensor1 quantized_gemv_q4_k(const QuantizedMatrix& w, const Tensor1& x) {
  const KActivations a(x);
  const std::size_t supers = w.cols / kSuper, groups = (w.rows + kRows - 1) / kRows;
  Tensor1 y = Tensor1::from_shape({w.rows});
#pragma omp parallel
  {
    const std::size_t stride = (supers + kGroup - 1) / kGroup * kGroup;  // each row's terms, padded
    std::vector<float> plus(kRows * stride), minus(kRows * stride);
#pragma omp for schedule(static)
    for (std::ptrdiff_t g = 0; g < static_cast<std::ptrdiff_t>(groups); ++g) {
      const std::size_t r0 = static_cast<std::size_t>(g) * kRows, count = std::min(kRows, w.rows - r0);
      for (std::size_t i = 0; i < count; ++i)
        q4_k_terms(w.row(r0 + i), supers, a, plus.data() + i * stride, minus.data() + i * stride);
      // y_r = ((y_r + plus_0) - minus_0) + plus_1 ..., the reference's order; four rows side by side
      float sums[kRows] = {};
      for (std::size_t b = 0; b < supers; ++b)
        for (std::size_t i = 0; i < kRows; ++i) sums[i] = (sums[i] + plus[i * stride + b]) - minus[i * stride + b];
      for (std::size_t i = 0; i < count; ++i) y(r0 + i) = sums[i];
    }
  }
  return y;
}

}  // namespace

Tensor1 quantized_gemv(const QuantizedMatrix& w, const Tensor1& x) {
  ref::validate_quantized_gemv("quantized_gemv", w, x);
  if (w.type == GgmlType::q4_K) return quantized_gemv_q4_k(w, x);
  const Activations a(x, kQ4_0Pairs && w.type == GgmlType::q4_0);
  const std::size_t blocks = w.cols / kBlock, groups = (w.rows + kRows - 1) / kRows;
  Tensor1 y = Tensor1::from_shape({w.rows});
#pragma omp parallel
  {
    const std::size_t stride = (blocks + kGroup - 1) / kGroup * kGroup;  // each row's terms, padded
    std::vector<float> terms(kRows * stride);
#pragma omp for schedule(static)
    for (std::ptrdiff_t g = 0; g < static_cast<std::ptrdiff_t>(groups); ++g) {
      const std::size_t r0 = static_cast<std::size_t>(g) * kRows, count = std::min(kRows, w.rows - r0);
      for (std::size_t i = 0; i < count; ++i) block_terms(w.type, w.row(r0 + i), blocks, a, terms.data() + i * stride);
      // y_r = ((term_0 + term_1) + term_2) + ..., the reference's order; four rows side by side
      float sums[kRows] = {};
      for (std::size_t b = 0; b < blocks; ++b)
        for (std::size_t i = 0; i < kRows; ++i) sums[i] += terms[i * stride + b];
      for (std::size_t i = 0; i < count; ++i) y(r0 + i) = sums[i];
    }
  }
  return y;
}

}  // namespace tvlab::opt
