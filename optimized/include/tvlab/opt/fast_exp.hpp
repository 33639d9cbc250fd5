#pragma once
/// @file
/// The vectorised exponential of flash attention v3 and its backward v4 (chapter 04).

#include <span>
#include <vector>

namespace tvlab::opt {

/// The largest relative error of `fast_exp2` over its range, \f$ |\hat y - 2^x| / 2^x \f$ for
/// \f$ -126 \le x < 128 \f$: a bound a little above the measured 3.5e-7 (about 6 units in the
/// last place of a float, counted as \f$ 2^{-24} \f$ relative; xsimd's `exp` is within about 2).
inline constexpr double kFastExp2MaxRelativeError = 4e-7;

/// @ingroup ch04
/// \f$ 2^{x_i} \f$ for each element as flash attention v3 computes its weights
/// \f$ \tilde P = 2^{S \log_2 e - m} \f$: \f$ x = n + r \f$ with \f$ n = \mathrm{round}(x) \f$, a
/// degree-5 polynomial for \f$ 2^r \f$ on \f$ [-\tfrac12, \tfrac12] \f$, and \f$ n \f$ added to the
/// exponent bits. Exactly 0 for \f$ x < -126 \f$ and for \f$ -\infty \f$ (hidden scores), 1 for
/// 0, relative error below `kFastExp2MaxRelativeError` for \f$ -126 \le x < 128 \f$. A `tvlab::Error`
/// naming `x` for a NaN or an element of 128 or more (the result would not be a float).
std::vector<float> fast_exp2(std::span<const float> x);

}  // namespace tvlab::opt
