#pragma once
/// @file
/// Low-precision round trips: float -> bf16 / fp16 bits -> float, with round-to-nearest-even.
///
/// Emulating a format this way lets the reference code show exactly what a GPU kernel that
/// stores bf16 or fp16 loses. bf16 keeps float's 8 exponent bits and 7 mantissa bits; fp16
/// has 5 exponent bits (max 65504, subnormals below 2^-14) and 10 mantissa bits.

#include <cstdint>

namespace tvlab {

std::uint16_t float_to_bf16_bits(float x);   ///< round to nearest even; NaN stays NaN
float bf16_bits_to_float(std::uint16_t bits);
std::uint16_t float_to_fp16_bits(float x);   ///< round to nearest even; overflow gives inf
float fp16_bits_to_float(std::uint16_t bits);

/// The value `x` becomes after a round trip through the format.
inline float round_to_bf16(float x) { return bf16_bits_to_float(float_to_bf16_bits(x)); }
inline float round_to_fp16(float x) { return fp16_bits_to_float(float_to_fp16_bits(x)); }

}  // namespace tvlab
