#include "tvlab/core/dtype.hpp"

#include <algorithm>
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

// ------------------------------------------------------------------------------------ FP8

namespace {

// A small binary format: `mantissa_bits` stored mantissa bits, exponent bias `bias`, normal
// exponents from 1 - bias up. In the binade [2^e, 2^(e+1)) the spacing is 2^(e - mantissa_bits);
// below the smallest normal number 2^(1 - bias) (subnormals) it stays 2^(1 - bias - mantissa_bits).
struct SmallFloat {
  int mantissa_bits, bias;
};

// |x| rounded to the format's grid, to nearest even (nearbyint in the default rounding mode);
// a / spacing is exact because the spacing is a power of two. The range is not checked here.
double round_magnitude(double a, SmallFloat f) {
  if (a == 0.0) return 0.0;
  const int e = std::max(std::ilogb(a), 1 - f.bias);
  const double spacing = std::ldexp(1.0, e - f.mantissa_bits);
  return std::nearbyint(a / spacing) * spacing;
}

// The bits of a representable magnitude r (already rounded, within range): exponent field and
// mantissa field, without the sign.
std::uint8_t encode_magnitude(double r, SmallFloat f) {
  const double smallest_normal = std::ldexp(1.0, 1 - f.bias);
  if (r < smallest_normal)  // subnormal: exponent field 0, mantissa = r / 2^(1 - bias - mantissa_bits)
    return static_cast<std::uint8_t>(std::ldexp(r, f.bias - 1 + f.mantissa_bits));
  const int e = std::ilogb(r);
  const auto mantissa = static_cast<unsigned>(std::ldexp(r, f.mantissa_bits - e)) - (1u << f.mantissa_bits);
  return static_cast<std::uint8_t>((static_cast<unsigned>(e + f.bias) << f.mantissa_bits) | mantissa);
}

// The value of the exponent and mantissa fields (special encodings handled by the caller).
float decode_magnitude(unsigned exponent_field, unsigned mantissa, SmallFloat f) {
  if (exponent_field == 0) return static_cast<float>(std::ldexp(static_cast<double>(mantissa), 1 - f.bias - f.mantissa_bits));
  return static_cast<float>(std::ldexp(static_cast<double>((1u << f.mantissa_bits) + mantissa),
                                       static_cast<int>(exponent_field) - f.bias - f.mantissa_bits));
}

constexpr SmallFloat kE4m3{3, 7};
constexpr SmallFloat kE5m2{2, 15};

}  // namespace

std::uint8_t float_to_e4m3_bits(float x) {
  const std::uint8_t sign = std::signbit(x) ? 0x80u : 0x00u;
  if (std::isnan(x)) return static_cast<std::uint8_t>(sign | 0x7Fu);  // S.1111.111
  if (std::isinf(x)) return static_cast<std::uint8_t>(sign | 0x7Eu);  // saturates to 448 = S.1111.110
  const double r = std::min(round_magnitude(std::fabs(static_cast<double>(x)), kE4m3), static_cast<double>(kE4m3Max));
  return static_cast<std::uint8_t>(sign | encode_magnitude(r, kE4m3));
}

float e4m3_bits_to_float(std::uint8_t bits) {
  const unsigned exponent = (bits >> 3) & 0xFu, mantissa = bits & 0x7u;
  if (exponent == 0xF && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  const float value = decode_magnitude(exponent, mantissa, kE4m3);
  return (bits & 0x80u) ? -value : value;
}

std::uint8_t float_to_e5m2_bits(float x) {
  const std::uint8_t sign = std::signbit(x) ? 0x80u : 0x00u;
  if (std::isnan(x)) return static_cast<std::uint8_t>(sign | 0x7Eu);  // exponent all ones, mantissa != 0
  if (std::isinf(x)) return static_cast<std::uint8_t>(sign | 0x7Cu);
  const double r = round_magnitude(std::fabs(static_cast<double>(x)), kE5m2);
  if (r > kE5m2Max) return static_cast<std::uint8_t>(sign | 0x7Cu);  // inf
  return static_cast<std::uint8_t>(sign | encode_magnitude(r, kE5m2));
}

float e5m2_bits_to_float(std::uint8_t bits) {
  const unsigned exponent = (bits >> 2) & 0x1Fu, mantissa = bits & 0x3u;
  float value = 0.0f;
  if (exponent == 0x1F) {
    value = mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    value = decode_magnitude(exponent, mantissa, kE5m2);
  }
  return (bits & 0x80u) ? -value : value;
}

}  // namespace tvlab
