#include "tvlab/core/error.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>

namespace tvlab {

float max_abs_or_inf(const float* x, std::size_t n) {
  constexpr std::uint32_t kAbsMask = 0x7fffffffu;  // all but the sign bit
  constexpr std::uint32_t kInfBits = 0x7f800000u;  // +inf; NaNs lie above it
  // max_i (bits(x_i) & 0x7fffffff): the largest |x_i|'s bits, or >= +inf's if any is not finite.
  // Signed 32-bit lanes: every masked value is non-negative, and x86's SIMD has a signed maximum.
  std::int32_t largest = 0;
  for (std::size_t i = 0; i < n; ++i)
    largest = std::max(largest, static_cast<std::int32_t>(std::bit_cast<std::uint32_t>(x[i]) & kAbsMask));
  if (static_cast<std::uint32_t>(largest) >= kInfBits) return std::numeric_limits<float>::infinity();
  return std::bit_cast<float>(static_cast<std::uint32_t>(largest));
}

}  // namespace tvlab
