#pragma once
/// @file
/// Low-precision round trips: float -> bf16 / fp16 / fp8 bits -> float, with round-to-nearest-even.
///
/// Emulating a format this way lets the reference code show exactly what a GPU kernel that
/// stores bf16 or fp16 loses. bf16 keeps float's 8 exponent bits and 7 mantissa bits; fp16
/// has 5 exponent bits (max 65504, subnormals below 2^-14) and 10 mantissa bits. The two FP8
/// formats of the OCP 8-bit floating point specification (used by H100 tensor cores and
/// FlashAttention-3): E4M3 (4 exponent bits, bias 7, 3 mantissa bits; no infinity, S.1111.111 is
/// NaN, so the largest value is 448; subnormals below 2^-6 down to 2^-9) and E5M2 (5 exponent
/// bits, bias 15, 2 mantissa bits; fp16's exponent range, largest 57344, with infinities).

#include <cstdint>

namespace tvlab {

std::uint16_t float_to_bf16_bits(float x);   ///< round to nearest even; NaN stays NaN
float bf16_bits_to_float(std::uint16_t bits);
std::uint16_t float_to_fp16_bits(float x);   ///< round to nearest even; overflow gives inf
float fp16_bits_to_float(std::uint16_t bits);

/// Round to nearest even. Beyond the range (and for +-inf) the result saturates to +-448, as
/// CUDA's `__NV_SATFINITE` conversion does: scaled FP8 kernels choose the scale so that the
/// largest value lands near 448, and a saturated outlier costs less than an inf. NaN stays NaN.
std::uint8_t float_to_e4m3_bits(float x);
float e4m3_bits_to_float(std::uint8_t bits);
/// Round to nearest even; values that round beyond 57344 become inf (IEEE overflow, as fp16).
std::uint8_t float_to_e5m2_bits(float x);
float e5m2_bits_to_float(std::uint8_t bits);

/// The largest finite values of the FP8 formats.
inline constexpr float kE4m3Max = 448.0f;
inline constexpr float kE5m2Max = 57344.0f;

/// The value `x` becomes after a round trip through the format.
inline float round_to_bf16(float x) { return bf16_bits_to_float(float_to_bf16_bits(x)); }
inline float round_to_fp16(float x) { return fp16_bits_to_float(float_to_fp16_bits(x)); }
inline float round_to_e4m3(float x) { return e4m3_bits_to_float(float_to_e4m3_bits(x)); }
inline float round_to_e5m2(float x) { return e5m2_bits_to_float(float_to_e5m2_bits(x)); }

}  // namespace tvlab
