#include "tvlab/core/dtype.hpp"

#include <bit>
#include <cmath>
#include <limits>

namespace tvlab {

// bf16 is the top 16 bits of a float. Round to nearest, ties to even: add 0x7FFF plus the
// lowest kept bit, then truncate. NaN is handled first so the rounding cannot turn it into inf.
std::uint16_t float_to_bf16_bits(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  if (std::isnan(x)) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN
  const std::uint32_t lsb = (bits >> 16) & 1u;
  return static_cast<std::uint16_t>((bits + 0x7FFFu + lsb) >> 16);
}

float bf16_bits_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

// fp16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Normal numbers 2^-14 .. 65504,
// subnormals down to 2^-24. Values that round above 65504 become inf (IEEE overflow).
std::uint16_t float_to_fp16_bits(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const float a = std::fabs(x);
  if (std::isnan(x)) return static_cast<std::uint16_t>(sign | 0x7E00u);
  if (a >= 65520.0f) return static_cast<std::uint16_t>(sign | 0x7C00u);  // 65520 rounds to inf
  if (a < 0x1.0p-14f) {
    // Subnormal: the value in units of 2^-24, rounded half to even (nearbyint uses the
    // default rounding mode, which is round-to-nearest-even).
    const float units = std::nearbyint(a * 0x1.0p24f);
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(units));
  }
  // Normal: re-bias the exponent (127 -> 15) and round the 23-bit mantissa to 10 bits.
  std::uint32_t magnitude = bits & 0x7FFFFFFFu;
  const std::uint32_t lsb = (magnitude >> 13) & 1u;
  magnitude += 0x0FFFu + lsb;  // round to nearest even at bit 13; a carry bumps the exponent
  const std::uint32_t exponent = (magnitude >> 23) - 127 + 15;
  const std::uint32_t mantissa = (magnitude >> 13) & 0x3FFu;
  return static_cast<std::uint16_t>(sign | (exponent << 10) | mantissa);
}

float fp16_bits_to_float(std::uint16_t h) {
  const bool negative = (h & 0x8000u) != 0;
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  float value = 0.0f;
  if (exponent == 0) {
    value = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    value = mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    value = std::ldexp(static_cast<float>(1024 + mantissa), exponent - 25);
  }
  return negative ? -value : value;
}

}  // namespace tvlab
