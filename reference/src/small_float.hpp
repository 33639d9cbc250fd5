#pragma once
// The small binary floating-point formats of chapter 08 (FP8 E4M3 and E5M2, FP4 E2M1), encoded and
// decoded from their bit definitions. Shared by fp8.cpp and microscaling.cpp; not a public header.
//
// A code is sign | exponent field E (e_bits) | mantissa field m (m_bits). With emin = 1 - bias:
//   E = 0:  (-1)^s 2^emin (m / 2^M)           (zero and the subnormals)
//   E > 0:  (-1)^s 2^(E - bias) (1 + m / 2^M)  (the normal numbers)
// Which codes are NaN or infinity depends on the format; the caller handles them.

#include <bit>
#include <cmath>
#include <cstdint>

namespace tvlab::ref::detail {

struct SmallFloatFormat {
  int exponent_bits, mantissa_bits, bias;
  unsigned max_code;  // the magnitude code (sign bit clear) of the largest finite value
};

// The magnitude code nearest to |x|, ties to the even code, with the exponent unbounded above:
// the result may exceed max_code (and even the format's width), so that the caller decides what
// overflow means. x must be finite.
//
// |x| = s 2^(E_f - 23) with the 24-bit significand s (the implicit 1 included for normal floats) and
// E_f = max(float exponent field, 1) - 127. Its FP8 binade is e = max(E_f, emin), where the spacing of
// the grid is 2^(e - M), so |x| is q = s / 2^r grid steps with r = 23 + e - M - E_f, rounded half to
// even on the r bits shifted out. The code is then ((e - emin) << M) + q: for a normal result
// q = 2^M + m puts the exponent field e - emin + 1 = e + bias above the mantissa m, for a subnormal one
// (e = emin) it is q itself, and q = 2^(M+1) (a carry out of the mantissa) moves to the next binade.
inline unsigned round_to_code(float x, const SmallFloatFormat& f) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x) & 0x7FFFFFFFu;
  const int field = static_cast<int>(bits >> 23);
  if (bits == 0) return 0;
  const std::uint32_t s = (bits & 0x7FFFFFu) | (field != 0 ? 0x800000u : 0u);
  const int e_f = (field != 0 ? field : 1) - 127;
  const int emin = 1 - f.bias;
  const int e = e_f > emin ? e_f : emin;
  const int r = 23 + e - f.mantissa_bits - e_f;  // at least 23 - M > 0
  if (r > 24) return 0;                            // |x| < half the smallest step (s < 2^24)
  std::uint32_t q = s >> r;
  const std::uint32_t rest = s & ((1u << r) - 1u), half = 1u << (r - 1);
  if (rest > half || (rest == half && (q & 1u))) ++q;  // round half to even
  return (static_cast<unsigned>(e - emin) << f.mantissa_bits) + q;
}

// The value of a magnitude code that is neither NaN nor infinity, by the formula above (exact in
// double: at most 4 significant bits).
inline double code_value(unsigned code, const SmallFloatFormat& f) {
  const unsigned exponent = code >> f.mantissa_bits, mantissa = code & ((1u << f.mantissa_bits) - 1u);
  if (exponent == 0) return std::ldexp(static_cast<double>(mantissa), 1 - f.bias - f.mantissa_bits);
  return std::ldexp(static_cast<double>((1u << f.mantissa_bits) + mantissa),
                    static_cast<int>(exponent) - f.bias - f.mantissa_bits);
}

inline constexpr SmallFloatFormat kE4m3Format{4, 3, 7, 0x7E};   // 448 = S.1111.110
inline constexpr SmallFloatFormat kE5m2Format{5, 2, 15, 0x7B};  // 57344 = S.11110.11
inline constexpr SmallFloatFormat kE2m1Format{2, 1, 1, 0x7};    // 6 = S.11.1

}  // namespace tvlab::ref::detail
