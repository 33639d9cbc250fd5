#include "tvlab/ref/fp8.hpp"

#include <cmath>
#include <limits>

#include "small_float.hpp"
#include "tvlab/core/error.hpp"

namespace tvlab::ref {
namespace {

const detail::SmallFloatFormat& layout(Fp8Format format) {
  return format == Fp8Format::e4m3 ? detail::kE4m3Format : detail::kE5m2Format;
}

// The NaN code (sign bit clear), and what overflow gives without saturation.
std::uint8_t nan_code(Fp8Format format) { return format == Fp8Format::e4m3 ? 0x7F : 0x7E; }
std::uint8_t no_saturate_overflow(Fp8Format format) { return format == Fp8Format::e4m3 ? 0x7F : 0x7C; }

}  // namespace

std::uint8_t fp8_encode(float x, Fp8Format format, Overflow overflow) {
  const detail::SmallFloatFormat& f = layout(format);
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return static_cast<std::uint8_t>(sign | nan_code(format));
  // beyond the range: +-max when saturating, else NaN (E4M3) or +-inf (E5M2); inf counts as beyond
  const unsigned code = std::isinf(x) ? f.max_code + 1 : detail::round_to_code(x, f);
  if (code > f.max_code)
    return static_cast<std::uint8_t>(sign | (overflow == Overflow::saturate ? f.max_code : no_saturate_overflow(format)));
  return static_cast<std::uint8_t>(sign | code);
}

float fp8_decode(std::uint8_t code, Fp8Format format) {
  const detail::SmallFloatFormat& f = layout(format);
  const unsigned magnitude = code & 0x7Fu;
  const float sign = (code & 0x80u) ? -1.0f : 1.0f;
  if (format == Fp8Format::e4m3 && magnitude == 0x7F) return std::numeric_limits<float>::quiet_NaN();
  if (format == Fp8Format::e5m2 && magnitude >= 0x7C)  // exponent field 11111: inf (m = 0) or NaN
    return magnitude == 0x7C ? sign * std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  return sign * static_cast<float>(detail::code_value(magnitude, f));
}

float fp8_max(Fp8Format format) { return static_cast<float>(detail::code_value(layout(format).max_code, layout(format))); }

const char* fp8_name(Fp8Format format) { return format == Fp8Format::e4m3 ? "E4M3" : "E5M2"; }

std::vector<std::uint8_t> fp8_encode(const Tensor1& x, Fp8Format format, Overflow overflow) {
  require_nonempty("fp8_encode", "x", x);
  std::vector<std::uint8_t> codes(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) codes[i] = fp8_encode(x(i), format, overflow);
  return codes;
}

Tensor1 fp8_decode(const std::vector<std::uint8_t>& codes, Fp8Format format) {
  require(!codes.empty(), "fp8_decode", "codes is empty");
  Tensor1 y = Tensor1::from_shape({codes.size()});
  for (std::size_t i = 0; i < codes.size(); ++i) y(i) = fp8_decode(codes[i], format);
  return y;
}

}  // namespace tvlab::ref
