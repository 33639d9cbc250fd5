#pragma once
/// @file
/// Chapter 08's FP8 exercise: the E4M3 encoder, round to nearest even, saturating.

#include <cstdint>

namespace tvlab::student {

/// @ingroup ch08
/// Same contract as `tvlab::ref::fp8_encode(x, Fp8Format::e4m3, Overflow::saturate)`: the E4M3 code
/// (S.EEEE.MMM, bias 7) nearest to x, ties to the even code; values that round beyond 448, and
/// \f$ \pm \f$ inf, give \f$ \pm \f$ 448 (S.1111.110); NaN gives S.1111.111 with x's sign.
std::uint8_t fp8_encode_e4m3(float x);

}  // namespace tvlab::student
