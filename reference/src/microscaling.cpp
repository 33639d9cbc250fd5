#include "tvlab/ref/microscaling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "small_float.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/ref/fp8.hpp"

namespace tvlab::ref {
namespace {

constexpr int kE8m0Bias = 127;

void require_format(const char* function, MxBlockFormat format) {
  const auto value = static_cast<int>(format);
  require(value >= 0 && value <= 2, function, "format (", value, ") is not an MX format: mxfp8_e4m3, mxfp8_e5m2 or mxfp4");
}

// The element code of a scaled value v = V_i / X: round to nearest even, clamp to +-max.
std::uint8_t encode_element(float v, MxBlockFormat format) {
  switch (format) {
    case MxBlockFormat::mxfp8_e4m3: return fp8_encode(v, Fp8Format::e4m3, Overflow::saturate);
    case MxBlockFormat::mxfp8_e5m2: return fp8_encode(v, Fp8Format::e5m2, Overflow::saturate);
    default: return e2m1_encode(v);
  }
}

}  // namespace

const char* mx_name(MxBlockFormat format) {
  switch (format) {
    case MxBlockFormat::mxfp8_e4m3: return "MXFP8 E4M3";
    case MxBlockFormat::mxfp8_e5m2: return "MXFP8 E5M2";
    case MxBlockFormat::mxfp4: return "MXFP4";
  }
  return "?";
}

int mx_emax_elem(MxBlockFormat format) {
  require_format("mx_emax_elem", format);
  // the exponent of the largest normal: 448 = 1.75 x 2^8, 57344 = 1.75 x 2^15, 6 = 1.5 x 2^2
  return format == MxBlockFormat::mxfp8_e4m3 ? 8 : format == MxBlockFormat::mxfp8_e5m2 ? 15 : 2;
}

float mx_element_max(MxBlockFormat format) {
  require_format("mx_element_max", format);
  if (format == MxBlockFormat::mxfp4) return 6.0f;
  return fp8_max(format == MxBlockFormat::mxfp8_e4m3 ? Fp8Format::e4m3 : Fp8Format::e5m2);
}

double mx_bits_per_element(MxBlockFormat format) {
  require_format("mx_bits_per_element", format);
  const double element_bits = format == MxBlockFormat::mxfp4 ? 4.0 : 8.0;
  return element_bits + 8.0 / static_cast<double>(kMxBlockSize);
}

float e8m0_decode(std::uint8_t code) {
  // 2^(e - 127); 0xFF is NaN. 2^-127 is a subnormal float, still exact.
  if (code == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(code) - kE8m0Bias);
}

std::uint8_t e2m1_encode(float x) {
  require(!std::isnan(x), "e2m1_encode", "x (", x, ") is NaN, which E2M1 cannot represent");
  const std::uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
  const unsigned code = std::isinf(x) ? 0x8u : detail::round_to_code(x, detail::kE2m1Format);
  return static_cast<std::uint8_t>(sign | std::min(code, detail::kE2m1Format.max_code));  // saturate at 6
}

float e2m1_decode(std::uint8_t code) {
  require(code <= 0x0F, "e2m1_decode", "code (", static_cast<int>(code), ") has more than 4 bits");
  const float value = static_cast<float>(detail::code_value(code & 0x7u, detail::kE2m1Format));
  return (code & 0x8u) ? -value : value;
}

float mx_element_decode(std::uint8_t code, MxBlockFormat format) {
  require_format("mx_element_decode", format);
  switch (format) {
    case MxBlockFormat::mxfp8_e4m3: return fp8_decode(code, Fp8Format::e4m3);
    case MxBlockFormat::mxfp8_e5m2: return fp8_decode(code, Fp8Format::e5m2);
    default: return e2m1_decode(code);
  }
}

std::uint8_t mx_shared_scale(const float* block, MxBlockFormat format) {
  const int emax_elem = mx_emax_elem(format);
  float amax = 0.0f;  // max_i |V_i|
  for (std::size_t i = 0; i < kMxBlockSize; ++i) {
    require(std::isfinite(block[i]), "mx_shared_scale", "block[", i, "] (", block[i], ") is not finite");
    amax = std::max(amax, std::fabs(block[i]));
  }
  // shared_exp = floor(log2(amax)) - emax_elem, in E8M0's range [-127, 127]; ilogb is floor(log2)
  // exactly (subnormal floats included); an all-zero block takes the lower end (log2(0) = -inf)
  const int floor_log2 = amax > 0.0f ? std::ilogb(amax) : -kE8m0Bias - 1000;
  const int shared_exp = std::clamp(floor_log2 - emax_elem, -kE8m0Bias, kE8m0Bias);
  return static_cast<std::uint8_t>(shared_exp + kE8m0Bias);
}

MxRow mx_quantize(const Tensor1& x, MxBlockFormat format) {
  require_format("mx_quantize", format);
  require_nonempty("mx_quantize", "x", x);
  require(x.size() % kMxBlockSize == 0, "mx_quantize", "x's length (", x.size(),
          ") must be a multiple of the block size ", kMxBlockSize);
  require_finite("mx_quantize", "x", x);
  MxRow q{format, std::vector<std::uint8_t>(x.size() / kMxBlockSize), std::vector<std::uint8_t>(x.size())};
  for (std::size_t b = 0; b < q.scales.size(); ++b) {
    const float* block = &x(b * kMxBlockSize);
    q.scales[b] = mx_shared_scale(block, format);
    const int shared_exp = static_cast<int>(q.scales[b]) - kE8m0Bias;
    // P_i = quantize_to_element_format(V_i / X): dividing by the power of two X is exact (ldexp), but
    // for values so small that the quotient leaves float's range, far below any element code
    for (std::size_t i = 0; i < kMxBlockSize; ++i)
      q.elements[b * kMxBlockSize + i] = encode_element(std::ldexp(block[i], -shared_exp), format);
  }
  return q;
}

Tensor1 mx_dequantize(const MxRow& q) {
  require_format("mx_dequantize", q.format);
  require(!q.elements.empty(), "mx_dequantize", "q.elements is empty");
  require(q.elements.size() == q.scales.size() * kMxBlockSize, "mx_dequantize", "q.elements has ", q.elements.size(),
          " codes, expected ", q.scales.size() * kMxBlockSize, " (32 per scale, ", q.scales.size(), " scales)");
  Tensor1 y = Tensor1::from_shape({q.elements.size()});
  for (std::size_t i = 0; i < q.elements.size(); ++i) {
    if (q.format == MxBlockFormat::mxfp4)
      require(q.elements[i] <= 0x0F, "mx_dequantize", "q.elements[", i, "] (", static_cast<int>(q.elements[i]),
              ") is not a 4-bit E2M1 code");
    // x^_i = X P_i, in double and rounded once to float (X P_i can be a subnormal float)
    const std::uint8_t scale = q.scales[i / kMxBlockSize];
    const double element = mx_element_decode(q.elements[i], q.format);
    y(i) = scale == 0xFF ? std::numeric_limits<float>::quiet_NaN()
                         : static_cast<float>(std::ldexp(element, static_cast<int>(scale) - kE8m0Bias));
  }
  return y;
}

double mx_round_trip_rmse(const Tensor2& x, MxBlockFormat format) {
  require_nonempty("mx_round_trip_rmse", "x", x);
  double sum = 0.0;
  for (std::size_t r = 0; r < x.shape()[0]; ++r) {
    const Tensor1 row = xt::view(x, r, xt::all());
    const Tensor1 back = mx_dequantize(mx_quantize(row, format));
    for (std::size_t c = 0; c < x.shape()[1]; ++c) {
      const double e = static_cast<double>(x(r, c)) - static_cast<double>(back(c));
      sum += e * e;
    }
  }
  return std::sqrt(sum / static_cast<double>(x.size()));
}

}  // namespace tvlab::ref
