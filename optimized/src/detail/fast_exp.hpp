#pragma once
// 2^x on whole SIMD registers, for the softmax of flash attention v3 and its backward v4 (the
// scores are multiplied by log2 e beforehand, so e^s = 2^{s log2 e}). Public entry and its
// accuracy: tvlab/opt/fast_exp.hpp.

#include <xsimd/xsimd.hpp>

#include <cstdint>

namespace tvlab::opt::detail {

/// 2^x for x < 128, 0 for x < -126 (and for -inf). Write x = n + r with n = round(x) and
/// r in [-1/2, 1/2]; then 2^x = 2^r 2^n, where
///
///   2^r ~ c0 + c1 r + ... + c5 r^5      (Horner: five FMAs)
///
/// and 2^n is added to the exponent field of the result: n + 127 sits in bits 23..30 of a float.
/// The rounding uses no rounding instruction: adding 1.5 * 2^23 pushes x's fraction out of the
/// 23-bit mantissa (round to nearest even), so t = x + 1.5 * 2^23 holds n in its low bits and
/// t - 1.5 * 2^23 is n as a float. Shifting t's bits left by 23 keeps exactly n << 23 (the
/// constant's own bits shift out). The coefficients are a least-squares fit in Chebyshev form of
/// 2^r on [-1/2, 1/2] (c0 = 1 and c1 = ln 2 to float precision); measured maximum relative error
/// 3.5e-7 (about 6 units in the last place).
inline xsimd::batch<float> fast_exp2(xsimd::batch<float> x) {
  using Floats = xsimd::batch<float>;
  using Ints = xsimd::batch<std::int32_t>;
  constexpr float kLowest = -126.0f;        // below it 2^x is not a normal float: give 0
  constexpr float kShifter = 12582912.0f;   // 1.5 * 2^23
  const Floats clamped = xsimd::max(x, Floats(kLowest));
  const Floats t = clamped + Floats(kShifter);
  const Floats r = clamped - (t - Floats(kShifter));  // x - n, in [-1/2, 1/2]
  // 2^r by Horner's rule.
  Floats p(1.3395280111581087e-3f);
  p = xsimd::fma(p, r, Floats(9.670763276517391e-3f));
  p = xsimd::fma(p, r, Floats(5.550340563058853e-2f));
  p = xsimd::fma(p, r, Floats(2.4022211134433746e-1f));
  p = xsimd::fma(p, r, Floats(6.931471824645996e-1f));
  p = xsimd::fma(p, r, Floats(1.0f));
  // 2^r 2^n: n added to the exponent field.
  const Ints n_in_exponent = xsimd::bitwise_cast<Ints>(t) << 23;
  const Floats result = xsimd::bitwise_cast<Floats>(xsimd::bitwise_cast<Ints>(p) + n_in_exponent);
  return xsimd::select(x < Floats(kLowest), Floats(0.0f), result);
}

}  // namespace tvlab::opt::detail
