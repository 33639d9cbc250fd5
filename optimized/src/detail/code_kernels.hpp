#pragma once
// Chapter 05's decode step reading INT8 and FP8 E4M3 codes directly, without a float copy of the
// cache. With one scale s_t per token and kv head (symmetric, group_size = head_dim), a cached row
// is \f$ \hat x_t = s_t\, c_t \f$ with c_t its codes read as numbers, so the scale comes out of
// both products of attention:
//   scores  \f$ q \cdot \hat k_t = s_t\,(q \cdot c_t) \f$: the dot product runs over the codes, and
//           s_t multiplies the reduced sum once;
//   P V     \f$ \sum_t p_t \hat v_t = \sum_t (p_t s_t)\, c_t \f$: s_t joins the softmax weight before
//           it is broadcast.
// Each chunk of kLanes codes is turned into floats in registers (INT8: sign extension and a
// conversion; E4M3: its bits moved into a float's fields) and used by four query rows, as the
// float kernels (split_decode.hpp's scores_register_blocked, flash_tiles.hpp's accumulate_pv) use
// each loaded chunk of a float row. Nothing is written to memory but the scores and the outputs:
// the buffer path (quantized_kv_attention.cpp's QuantizedRows) writes every row as floats and reads
// it back, which costs more than the 4x fewer bytes it reads from the cache save.
//
// These kernels take rows whose head_dim is a multiple of kLanes (every chunk a whole register);
// the decode step sends other head sizes through the buffer path.

#include <xsimd/xsimd.hpp>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "flash_tiles.hpp"
#include "split_decode.hpp"

namespace tvlab::opt::detail {

using IntBatch = xsimd::batch<std::int32_t>;
static_assert(IntBatch::size == kLanes, "one 32-bit integer lane per float lane");

/// kLanes one-byte codes at `p`, each sign-extended to a 32-bit integer. xsimd 8.1 has no
/// widening load from 8 to 32 bits, so AVX-512 and AVX2 use their one instruction for it
/// (vpmovsxbd); other targets go through a small array, which the compiler may vectorise.
inline IntBatch sign_extended_codes(const std::uint8_t* p) {
#if defined(__AVX512F__)
  static_assert(kLanes == 16, "xsimd's widest batch on AVX-512 holds 16 floats");
  return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#elif defined(__AVX2__)
  static_assert(kLanes == 8, "xsimd's widest batch on AVX2 holds 8 floats");
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
#else
  alignas(64) std::int32_t widened[kLanes];
  for (std::size_t i = 0; i < kLanes; ++i) widened[i] = static_cast<std::int8_t>(p[i]);
  return IntBatch::load_aligned(widened);
#endif
}

/// Symmetric INT8 codes: c is the two's complement byte, read as a float exactly.
struct Int8Codes {
  static constexpr std::size_t kBytes = 1;  // per element
  static FloatBatch load(const std::uint8_t* p) { return xsimd::batch_cast<float>(sign_extended_codes(p)); }
};

/// FP8 E4M3 codes b = s.eeee.mmm, read as kv_dequant_rows.hpp's e4m3_value reads one: the
/// sign at float's bit 31 and the 7 bits below it at bits 26..20 give a float that is
/// \f$ 2^{-120} \f$ times E4M3's value (normal and subnormal alike), which a multiplication by
/// \f$ 2^{120} \f$ makes exact. Sign-extended, the byte's sign fills bits 31..27 after the shift to
/// bit 20, so one mask keeps bit 31 and bits 26..20. The NaN codes s.1111.111 become float NaNs
/// (the bits 0x7fc00000, still NaN after the multiplication), so a NaN in the cache reaches the
/// output as it does through the buffer path.
struct E4m3Codes {
  static constexpr std::size_t kBytes = 1;
  static FloatBatch load(const std::uint8_t* p) {
    const IntBatch b = sign_extended_codes(p);
    const IntBatch placed = (b << 20) & IntBatch(static_cast<std::int32_t>(0x87f00000u));
    const IntBatch bits = xsimd::select((b & IntBatch(0x7f)) == IntBatch(0x7f), IntBatch(0x7fc00000), placed);
    return xsimd::bitwise_cast<FloatBatch>(bits) * FloatBatch(0x1p120f);
  }
};

/// bf16 values, two bytes each (little-endian): a bf16 value is the top half of the float it
/// stands for, so widening each 16-bit value to 32 bits and shifting it left by 16 gives that float
/// exactly. A bf16 cache has no scale (its CodeBlock's `scales` is nullptr: \f$ s_t = 1 \f$). xsimd
/// 8.1 has no widening load from 16 to 32 bits either: vpmovzxwd on AVX-512 and AVX2.
struct Bf16Codes {
  static constexpr std::size_t kBytes = 2;
  static FloatBatch load(const std::uint8_t* p) {
#if defined(__AVX512F__)
    const IntBatch widened = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
#elif defined(__AVX2__)
    const IntBatch widened = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#else
    alignas(64) std::int32_t lanes[kLanes];
    for (std::size_t i = 0; i < kLanes; ++i) {
      std::uint16_t bits;
      std::memcpy(&bits, p + 2 * i, sizeof bits);
      lanes[i] = static_cast<std::int32_t>(bits);
    }
    const IntBatch widened = IntBatch::load_aligned(lanes);
#endif
    return xsimd::bitwise_cast<FloatBatch>(widened << 16);
  }
};

/// Row c's scale \f$ s_c \f$, or 1 for a cache without scales (bf16).
inline float scale_of(const CodeBlock& block, std::size_t c) { return block.scales != nullptr ? block.scales[c] : 1.0f; }

/// S[r][c] = scale s_c (q_r . c_c) for r < rows, c < cols, one query row and four keys at a time
/// (four independent chains of FMAs, as scores_by_dot_products): the rows and keys the register
/// blocking of scores_from_codes leaves over. Every chunk of codes is converted once per row.
template <class Codes>
void scores_by_code_dot_products(const float* q, std::size_t rows, const CodeBlock& keys, std::size_t cols,
                                 std::size_t d, float scale, float* s, std::size_t lds) {
  std::size_t c = 0;
  for (; c + 4 <= cols; c += 4)
    for (std::size_t r = 0; r < rows; ++r) {
      FloatBatch acc[4] = {};
      for (std::size_t e = 0; e < d; e += kLanes) {
        const FloatBatch qe = FloatBatch::load_unaligned(q + r * d + e);
        for (std::size_t x = 0; x < 4; ++x)
          acc[x] = xsimd::fma(qe, Codes::load(keys.codes + (c + x) * keys.stride + e * Codes::kBytes), acc[x]);
      }
      for (std::size_t x = 0; x < 4; ++x) s[r * lds + c + x] = scale * scale_of(keys, c + x) * xsimd::hadd(acc[x]);
    }
  for (; c < cols; ++c)  // the last cols % 4 keys, one at a time
    for (std::size_t r = 0; r < rows; ++r) {
      FloatBatch acc(0.0f);
      for (std::size_t e = 0; e < d; e += kLanes)
        acc = xsimd::fma(FloatBatch::load_unaligned(q + r * d + e), Codes::load(keys.codes + c * keys.stride + e * Codes::kBytes),
                        acc);
      s[r * lds + c] = scale * scale_of(keys, c) * xsimd::hadd(acc);
    }
}

/// S[r][c] = scale q_r . \f$ \hat k_c \f$ = \f$ \text{scale}\; s_c\,(q_r \cdot c_c) \f$ for r < rows,
/// c < cols (q [rows, d], d a multiple of kLanes; key c's codes at keys.codes + c keys.stride, its
/// scale keys.scales[c]; S [rows, lds]). scores_register_blocked over codes: four query rows times
/// kBlockedKeys keys at a time, each chunk of codes converted once and used by the four rows, the
/// 16 partial sums reduced by one xsimd::haddp; each reduced dot product is then multiplied by
/// scale s_c, once. While the first rows are computed, the codes kPrefetchDistance positions ahead
/// are asked for, one cache line per 64 codes.
template <class Codes>
void scores_from_codes(const float* q, std::size_t rows, const CodeBlock& keys, std::size_t cols, std::size_t d,
                       float scale, float* s, std::size_t lds) {
  constexpr std::size_t R = kBlockedRows, K = kBlockedKeys, tile = R * K, kLine = 64;
  const std::size_t rows_blocked = tile == kLanes ? rows / R * R : 0, cols_blocked = cols / K * K;
  const std::array<std::size_t, kLanes>& lane_of = haddp_lanes();
  for (std::size_t r = 0; r < rows_blocked; r += R)
    for (std::size_t c = 0; c < cols_blocked; c += K) {
      // acc[i K + x] = lane-wise partial sums of q_{r+i} . c_{c+x}
      FloatBatch acc[tile] = {};
      for (std::size_t e = 0; e < d; e += kLanes) {
        FloatBatch k[K];
        for (std::size_t x = 0; x < K; ++x) {
          const std::uint8_t* codes = keys.codes + (c + x) * keys.stride + e * Codes::kBytes;
          k[x] = Codes::load(codes);
          keep_in_register(k[x]);
          if (keys.ahead != nullptr && r == 0 && e * Codes::kBytes % kLine == 0)
            prefetch_line(keys.ahead + (c + x) * keys.stride + e * Codes::kBytes);
        }
        for (std::size_t i = 0; i < R; ++i) {
          FloatBatch qe = FloatBatch::load_unaligned(q + (r + i) * d + e);
          keep_in_register(qe);
          for (std::size_t x = 0; x < K; ++x) acc[i * K + x] = xsimd::fma(qe, k[x], acc[i * K + x]);
        }
      }
      // Lane lane_of[i K + x] of the reduction is q_{r+i} . c_{c+x}; its key's scale s_{c+x} joins scale.
      alignas(64) float dots[tile];
      xsimd::haddp(acc).store_aligned(dots);
      for (std::size_t i = 0; i < R; ++i)
        for (std::size_t x = 0; x < K; ++x)
          s[(r + i) * lds + c + x] = scale * scale_of(keys, c + x) * dots[lane_of[i * K + x]];
    }
  // The rest: keys past cols_blocked for the blocked rows, then the rows past rows_blocked.
  if (cols_blocked < cols) {
    const CodeBlock rest{keys.codes + cols_blocked * keys.stride, keys.stride,
                         keys.scales != nullptr ? keys.scales + cols_blocked : nullptr};
    scores_by_code_dot_products<Codes>(q, rows_blocked, rest, cols - cols_blocked, d, scale, s + cols_blocked, lds);
  }
  if (rows_blocked < rows)
    scores_by_code_dot_products<Codes>(q + rows_blocked * d, rows - rows_blocked, keys, cols, d, scale,
                                       s + rows_blocked * lds, lds);
}

/// O[r][e] += \f$ \sum_c (p_{rc}\, s_c)\, \mathrm{code}_c[e] \f$ for r < rows, c < cols and the
/// columns [e0, e0 + V kLanes) (P [rows, lds], O [rows, ldo]): the value block's scales folded into
/// the weights, `Rows` (1 to 4) query rows sharing each converted chunk of codes, whose lines
/// kPrefetchDistance positions ahead the first block of rows asks for.
template <class Codes, std::size_t Rows, std::size_t V>
void pv_codes_block(const float* p, std::size_t lds, const CodeBlock& values, float* o, std::size_t ldo,
                    std::size_t cols, std::size_t e0, bool ask_ahead) {
  constexpr std::size_t kLine = 64;
  FloatBatch acc[Rows][V];
  for (std::size_t i = 0; i < Rows; ++i)
    for (std::size_t x = 0; x < V; ++x) acc[i][x] = FloatBatch::load_unaligned(o + i * ldo + e0 + x * kLanes);
  for (std::size_t c = 0; c < cols; ++c) {
    const std::uint8_t* row = values.codes + c * values.stride + e0 * Codes::kBytes;
    FloatBatch b[V];
    for (std::size_t x = 0; x < V; ++x) {
      b[x] = Codes::load(row + x * kLanes * Codes::kBytes);
      keep_in_register(b[x]);
      const std::size_t e = e0 + x * kLanes;
      if (ask_ahead && e * Codes::kBytes % kLine == 0) prefetch_line(values.ahead + c * values.stride + e * Codes::kBytes);
    }
    for (std::size_t i = 0; i < Rows; ++i) {
      const FloatBatch a(p[i * lds + c] * scale_of(values, c));  // p_t s_t, broadcast
      for (std::size_t x = 0; x < V; ++x) acc[i][x] = xsimd::fma(a, b[x], acc[i][x]);
    }
  }
  for (std::size_t i = 0; i < Rows; ++i)
    for (std::size_t x = 0; x < V; ++x) acc[i][x].store_unaligned(o + i * ldo + e0 + x * kLanes);
}

/// O[r][e] += \f$ \sum_c p_{rc}\, \hat v_c[e] = \sum_c (p_{rc}\, s_c)\, \mathrm{code}_c[e] \f$ for
/// r < rows, c < cols, e < d_v (d_v a multiple of kLanes; P [rows, lds], O [rows, ldo] with
/// ldo >= d_v): accumulate_pv over codes. Four query rows at a time, d_v in tiles of kTileCols
/// columns (kVectors registers per row) and then single registers, so that every chunk of codes is
/// converted once per four rows. O's columns past d_v are left as they are.
template <class Codes>
void accumulate_pv_from_codes(const float* p, std::size_t lds, const CodeBlock& values, float* o, std::size_t rows,
                              std::size_t cols, std::size_t d_v, std::size_t ldo) {
  const std::size_t tiled = d_v / kTileCols * kTileCols;
  // The rows ahead are asked for once, by the first block of rows.
  const auto columns = [&]<std::size_t Rows>(std::size_t r) {
    const bool ask_ahead = values.ahead != nullptr && r == 0;
    for (std::size_t e = 0; e < tiled; e += kTileCols)
      pv_codes_block<Codes, Rows, kVectors>(p + r * lds, lds, values, o + r * ldo, ldo, cols, e, ask_ahead);
    for (std::size_t e = tiled; e < d_v; e += kLanes)
      pv_codes_block<Codes, Rows, 1>(p + r * lds, lds, values, o + r * ldo, ldo, cols, e, ask_ahead);
  };
  std::size_t r = 0;
  for (; r + 4 <= rows; r += 4) columns.template operator()<4>(r);
  for (; r < rows; ++r) columns.template operator()<1>(r);
}

}  // namespace tvlab::opt::detail
