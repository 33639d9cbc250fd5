#pragma once
// Turning one row of a narrow KV cache back into floats, for the row sources of the split-K decode
// step (detail/split_decode.hpp): bf16 bits widened, INT8 and E4M3 codes times their row's scale.
// Each is a short loop over the row that the compiler vectorises (16 elements at a time with
// AVX-512). Shared by the paged pools' row sources (paged_attention.cpp) and the contiguous caches'
// (bf16_kv_decode.cpp, quantized_kv_attention.cpp).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

namespace tvlab::opt::detail {

// out[e] = the float whose bits are bits[e] followed by 16 zeros: a bf16 value is the top half of
// the float it stands for, so widening is exact.
inline void widen_bf16_row(const std::uint16_t* bits, std::size_t size, float* out) {
#pragma omp simd
  for (std::size_t e = 0; e < size; ++e) {
    const std::uint32_t widened = static_cast<std::uint32_t>(bits[e]) << 16;
    std::memcpy(out + e, &widened, sizeof widened);
  }
}

// E4M3 bits b = s.eeee.mmm as a float, by moving the bits into place: with the 7 bits below the
// sign at float's bits 26..20 (float's exponent field then holds eeee, its mantissa starts with
// mmm), the float is 2^{e-127} (1 + m/8), or 2^{-126} m/8 when e = 0, and 2^{120} times it is
// E4M3's 2^{e-7} (1 + m/8), or 2^{-6} m/8: normal and subnormal values alike, exactly. Only
// s.1111.111, E4M3's NaN, needs its own case. Vectorises to shifts, a multiply and a blend.
inline float e4m3_value(std::uint8_t b) {
  const std::uint32_t bits = (static_cast<std::uint32_t>(b & 0x80) << 24) | (static_cast<std::uint32_t>(b & 0x7f) << 20);
  float placed;
  std::memcpy(&placed, &bits, sizeof placed);
  return (b & 0x7f) == 0x7f ? std::numeric_limits<float>::quiet_NaN() : placed * 0x1p120f;
}

// out[e] = s q_e for a row of symmetric INT8 codes (two's complement bytes): x^ = s q.
inline void dequantize_int8_row(const std::uint8_t* codes, std::size_t size, float s, float* out) {
#pragma omp simd
  for (std::size_t e = 0; e < size; ++e) out[e] = s * static_cast<float>(static_cast<std::int8_t>(codes[e]));
}

// out[e] = s e4m3(q_e) for a row of E4M3 codes: x^ = s e4m3(q).
inline void dequantize_e4m3_row(const std::uint8_t* codes, std::size_t size, float s, float* out) {
#pragma omp simd
  for (std::size_t e = 0; e < size; ++e) out[e] = s * e4m3_value(codes[e]);
}

}  // namespace tvlab::opt::detail
