#pragma once
// The OFP8 formats as the specification defines them, in double, for chapter 08's tests: the value
// of every code from its sign, exponent and mantissa fields, and the code a real number converts to
// found by searching every code for the nearest value (no bit tricks, no shared code with
// tvlab::ref).

#include <cmath>
#include <cstdint>
#include <limits>

namespace tvlab::quant::fp8_oracle {

struct Format {
  int exponent_bits, mantissa_bits, bias;
  bool e4m3;  // E4M3: S.1111.111 is NaN, no infinity; E5M2: exponent field all ones is inf (m = 0) or NaN
  unsigned max_code;  // the magnitude code of the largest finite value
};

inline constexpr Format kE4m3{4, 3, 7, true, 0x7E};
inline constexpr Format kE5m2{5, 2, 15, false, 0x7B};

// (-1)^s 2^(E - bias) (1 + m / 2^M) for E > 0, (-1)^s 2^(1 - bias) (m / 2^M) for E = 0, ignoring the
// special codes: for the code just above the largest magnitude this is the value it would have in a
// format with more exponent range (480 for E4M3, 2^16 for E5M2), which round to nearest needs.
inline double formula(unsigned code, const Format& f) {
  const int s = (code >> 7) & 1;
  const int exponent = static_cast<int>((code & 0x7F) >> f.mantissa_bits);
  const int mantissa = static_cast<int>(code & ((1u << f.mantissa_bits) - 1u));
  const double fraction = mantissa / std::ldexp(1.0, f.mantissa_bits);
  const double magnitude = exponent == 0 ? std::ldexp(fraction, 1 - f.bias) : std::ldexp(1.0 + fraction, exponent - f.bias);
  return s ? -magnitude : magnitude;
}

// The value of a code, special codes included.
inline double value(unsigned code, const Format& f) {
  const unsigned magnitude = code & 0x7F;
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  if (f.e4m3 && magnitude == 0x7F) return std::numeric_limits<double>::quiet_NaN();
  if (!f.e4m3 && magnitude >= 0x7C)
    return magnitude == 0x7C ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  return formula(code, f);
}

inline bool is_nan_code(unsigned code, const Format& f) {
  const unsigned magnitude = code & 0x7F;
  return f.e4m3 ? magnitude == 0x7F : magnitude > 0x7C;
}

// The code of a finite or infinite x: the nearest of the magnitudes 0 ... max_code + 1 (the last one
// the out-of-range neighbour, value by the formula), a tie going to the even code; then a code beyond
// max_code (or an infinity) is the overflow: max_code when saturating, else NaN (E4M3) or inf (E5M2).
inline unsigned encode(double x, const Format& f, bool saturate) {
  const unsigned sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | (f.e4m3 ? 0x7Fu : 0x7Eu);
  const double a = std::fabs(x);
  // at or beyond the out-of-range neighbour it is the nearest (and there a - value is no longer exact
  // in double for every code, so the search could see false ties)
  unsigned best = f.max_code + 1;
  if (a < formula(f.max_code + 1, f)) {
    double best_distance = INFINITY;
    for (unsigned c = 0; c <= f.max_code + 1; ++c) {
      const double d = std::fabs(a - formula(c, f));
      if (d < best_distance || (d == best_distance && c % 2 == 0)) best = c, best_distance = d;
    }
  }
  if (best > f.max_code) return sign | (saturate ? f.max_code : (f.e4m3 ? 0x7Fu : 0x7Cu));
  return sign | best;
}

}  // namespace tvlab::quant::fp8_oracle
