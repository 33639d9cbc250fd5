#pragma once
/// @file
/// FP8 conversion of whole tensors on the CPU (chapter 08): the same codes and values as
/// `tvlab::ref::fp8_encode` / `fp8_decode`, sixteen at a time in AVX-512 registers, threads over
/// chunks.
///
/// The reference finds each code with a loop over the float's fields; here every step is an integer
/// or float instruction on sixteen lanes at once, chosen by masks instead of branches:
/// - a normal result: the float's bits without the sign, \f$ a \f$, rounded to \f$ M \f$ mantissa bits half
///   to even by adding \f$ 2^{22-M} - 1 \f$ plus the lowest kept bit and shifting right by \f$ 23 - M \f$;
///   the exponent's bias moves from 127 to the format's by one subtraction, and a carry out of the
///   mantissa lands in the exponent by itself;
/// - a subnormal result (\f$ |x| < 2^{e_{min}} \f$): \f$ |x| \cdot 2^{M - e_{min}} \f$, exact, converted to an integer
///   in the default rounding mode (to nearest, ties to even), which counts the grid steps of
///   \f$ 2^{e_{min} - M} \f$ directly (8 steps is the smallest normal code, so no case is special);
/// - then codes beyond the largest (and infinities) by the overflow mode, NaN, and the sign.
///
/// Decoding builds the float's bits from the exponent and mantissa fields (a subnormal code: the
/// mantissa times \f$ 2^{e_{min} - M} \f$), with NaN and infinity chosen by mask. Without AVX-512 the
/// reference's scalar functions run on the threads.

#include <cstdint>
#include <vector>

#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/fp8.hpp"

namespace tvlab::opt {

/// @ingroup ch08
/// Same codes and errors as `ref::fp8_encode(x, format, overflow)`.
std::vector<std::uint8_t> fp8_encode(const Tensor1& x, ref::Fp8Format format, ref::Overflow overflow);

/// @ingroup ch08
/// Same values (bit for bit, NaN as the reference's quiet NaN) and errors as `ref::fp8_decode`.
Tensor1 fp8_decode(const std::vector<std::uint8_t>& codes, ref::Fp8Format format);

}  // namespace tvlab::opt
