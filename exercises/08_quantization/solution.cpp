// Chapter 08 exercises: worked solutions. Each marked region is what a student writes;
// scripts/make_student.py turns this file into student.cpp with the regions replaced by
// NotImplemented stubs. Edit this file, then regenerate (`make student-stubs`).

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "tvlab/core/dtype.hpp"
#include "tvlab/student/block_quant.hpp"
#include "tvlab/student/fp8.hpp"

namespace tvlab::student {

void quantize_block_q8_0(const float* x, std::uint8_t* block) {
  // BEGIN EXERCISE 08.1 "one Q8_0 block: the scale d = max|x| / 127 in fp16, then 32 int8 codes round(x / d)" "Q8_0: eight bits and one scale"
  float amax = 0.0f;  // max_j |x_j|
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;  // an all-zero block: d = 0 and every code 0
  const std::uint16_t d_bits = float_to_fp16_bits(d);
  block[0] = static_cast<std::uint8_t>(d_bits & 0xFF);  // little-endian
  block[1] = static_cast<std::uint8_t>(d_bits >> 8);
  for (int j = 0; j < 32; ++j)  // round half away from zero, with the float d (not its fp16 rounding)
    block[2 + j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(std::round(x[j] * id)));
  // END EXERCISE
}

void quantize_block_q4_0(const float* x, std::uint8_t* block) {
  // BEGIN EXERCISE 08.2 "one Q4_0 block: d = x_max / -8 from the signed element of largest magnitude, codes min(15, trunc(x / d + 8.5)), two per byte" "Q4_0: four bits, packed in pairs"
  float amax = 0.0f, x_max = 0.0f;  // the first element of largest |x|, with its sign
  for (int j = 0; j < 32; ++j)
    if (amax < std::fabs(x[j])) amax = std::fabs(x[j]), x_max = x[j];
  const float d = x_max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const std::uint16_t d_bits = float_to_fp16_bits(d);
  block[0] = static_cast<std::uint8_t>(d_bits & 0xFF);
  block[1] = static_cast<std::uint8_t>(d_bits >> 8);
  for (int j = 0; j < 16; ++j) {
    // element j in the low nibble, element j + 16 in the high one
    const float scaled_lo = x[j] * id, scaled_hi = x[j + 16] * id;
    const int lo = std::min(15, static_cast<int>(static_cast<std::int8_t>(scaled_lo + 8.5f)));
    const int hi = std::min(15, static_cast<int>(static_cast<std::int8_t>(scaled_hi + 8.5f)));
    block[2 + j] = static_cast<std::uint8_t>(lo | (hi << 4));
  }
  // END EXERCISE
}

std::uint8_t fp8_encode_e4m3(float x) {
  // BEGIN EXERCISE 08.3 "the FP8 E4M3 encoder with round-to-nearest-even and saturation" "FP8: E4M3 and E5M2"
  const auto sign = static_cast<std::uint8_t>(std::signbit(x) ? 0x80 : 0x00);
  if (std::isnan(x)) return static_cast<std::uint8_t>(sign | 0x7F);  // S.1111.111, E4M3's only NaN
  if (std::isinf(x)) return static_cast<std::uint8_t>(sign | 0x7E);  // saturate: +-448 = S.1111.110
  const double a = std::fabs(static_cast<double>(x));
  if (a == 0.0) return sign;
  // the binade 2^e of a, but not below the smallest normal 2^-6 (the subnormals share its spacing)
  int e = 0;
  std::frexp(a, &e);  // a = f 2^e with f in [0.5, 1): floor(log2 a) = e - 1
  e = std::max(e - 1, -6);
  // a in steps of 2^(e - 3), rounded half to even (nearbyint, the default rounding mode); the
  // division by a power of two is exact
  const auto q = static_cast<unsigned>(std::nearbyint(std::ldexp(a, 3 - e)));
  // code = ((e + 6) << 3) + q: q = 8 + m puts the exponent field e + 7 above m; a subnormal is q itself
  // (e = -6); q = 16 (a carry) moves to the next binade
  const unsigned code = (static_cast<unsigned>(e + 6) << 3) + q;
  return static_cast<std::uint8_t>(sign | std::min(code, 0x7Eu));  // beyond 448 (and 480, the NaN code): 448
  // END EXERCISE
}

}  // namespace tvlab::student
