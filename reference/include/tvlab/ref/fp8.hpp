#pragma once
/// @file
/// Chapter 08, the two 8-bit floating-point formats of the OCP 8-bit Floating Point Specification
/// (OFP8, revision 1.0, 2023), encoded and decoded from their bit definitions, with the conversion's
/// overflow behaviour chosen explicitly.
///
/// A code is a sign bit s, an exponent field E of e bits and a mantissa field m of M bits. With
/// \f$ e_{min} = 1 - \mathrm{bias} \f$ it stands for
/// \f[ (-1)^s\, 2^{E - \mathrm{bias}} \left(1 + \frac{m}{2^M}\right) \quad (E > 0), \qquad
///     (-1)^s\, 2^{e_{min}} \frac{m}{2^M} \quad (E = 0,\ \text{zero and the subnormals}). \f]
/// | format | e, M | bias | largest | smallest normal | smallest subnormal | special codes |
/// | --- | --- | --- | --- | --- | --- | --- |
/// | E4M3 | 4, 3 | 7 | 448 = S.1111.110 | \f$ 2^{-6} \f$ | \f$ 2^{-9} \f$ | NaN = S.1111.111 only; no infinity |
/// | E5M2 | 5, 2 | 15 | 57344 = S.11110.11 | \f$ 2^{-14} \f$ | \f$ 2^{-16} \f$ | inf = S.11111.00, NaN = S.11111.{01, 10, 11} |
///
/// E4M3 gives up the infinities to gain a binade of values (256 to 448) and keeps one NaN per sign:
/// more precision for the forward pass. E5M2 is IEEE 754 binary16 with the low 8 mantissa bits cut
/// off: fp16's range, for gradients.
///
/// Conversion from float rounds to nearest, ties to even. What happens beyond the range is a mode of
/// the conversion (OFP8's saturating and non-saturating conversions; CUDA's `__NV_SATFINITE` and
/// `__NV_NOSAT`):
/// | input | Overflow::saturate | Overflow::no_saturate |
/// | --- | --- | --- |
/// | rounds beyond the largest value | \f$ \pm \f$ max | E4M3: NaN; E5M2: \f$ \pm \f$ inf |
/// | \f$ \pm \f$ inf | \f$ \pm \f$ max | E4M3: NaN; E5M2: \f$ \pm \f$ inf |
/// | NaN | NaN | NaN |
///
/// "Rounds beyond" is decided after rounding: E4M3's 464, halfway between 448 (mantissa 110) and the
/// 480 that S.1111.111 would be were it not NaN, rounds to the even 448; E5M2's 61440, halfway between
/// 57344 (mantissa 11) and \f$ 2^{16} \f$, rounds to the even \f$ 2^{16} \f$, beyond the range.
///
/// `tvlab::float_to_e4m3_bits` (core/dtype.hpp) is `fp8_encode(x, Fp8Format::e4m3, Overflow::saturate)`
/// and `tvlab::float_to_e5m2_bits` is `fp8_encode(x, Fp8Format::e5m2, Overflow::no_saturate)`, computed
/// another way (rounding in double); the tests hold them to each other.

#include <cstdint>
#include <vector>

#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch08
/// The two OFP8 formats.
enum class Fp8Format { e4m3, e5m2 };

/// @ingroup ch08
/// What a conversion does with values beyond the format's range (the table above).
enum class Overflow {
  saturate,     ///< beyond-range values and infinities become \f$ \pm \f$ max (`__NV_SATFINITE`)
  no_saturate,  ///< they become NaN (E4M3) or \f$ \pm \f$ inf (E5M2) (`__NV_NOSAT`)
};

/// @ingroup ch08
/// The code of x: round to nearest, ties to the even code, then the overflow mode. The sign is kept
/// (-0 and the negative values too small for the smallest subnormal give S = 1, magnitude 0); NaN gives
/// the format's NaN with x's sign (S.1111.111, S.11111.10).
std::uint8_t fp8_encode(float x, Fp8Format format, Overflow overflow);

/// @ingroup ch08
/// The value of a code, by the formula above (exact: every FP8 value is a float).
float fp8_decode(std::uint8_t code, Fp8Format format);

/// @ingroup ch08
/// The largest finite value: 448 (E4M3), 57344 (E5M2).
float fp8_max(Fp8Format format);

/// @ingroup ch08
/// "E4M3" or "E5M2".
const char* fp8_name(Fp8Format format);

/// @ingroup ch08
/// Every value of x `[n]` encoded: `codes[i] = fp8_encode(x[i], format, overflow)`, one by one.
/// Errors: an empty x. (NaN and infinities are values to encode, not errors.)
std::vector<std::uint8_t> fp8_encode(const Tensor1& x, Fp8Format format, Overflow overflow);

/// @ingroup ch08
/// Every code decoded: `y[i] = fp8_decode(codes[i], format)`. Errors: no codes.
Tensor1 fp8_decode(const std::vector<std::uint8_t>& codes, Fp8Format format);

}  // namespace tvlab::ref
