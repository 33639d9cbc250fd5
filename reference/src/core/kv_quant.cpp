#include "tvlab/core/kv_quant.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "tvlab/core/dtype.hpp"
#include "tvlab/core/error.hpp"

namespace tvlab {

KvQuantSpec int8_per_token(std::size_t head_dim) {
  return {.code = KvCodeType::int8, .axis = KvScaleAxis::per_token, .group_size = head_dim, .symmetric = true};
}

KvQuantSpec int8_per_channel(std::size_t tokens_per_group) {
  return {.code = KvCodeType::int8, .axis = KvScaleAxis::per_channel, .group_size = tokens_per_group,
          .symmetric = true};
}

KvQuantSpec int4_per_group(std::size_t group_size, bool symmetric) {
  return {.code = KvCodeType::int4, .axis = KvScaleAxis::per_token, .group_size = group_size, .symmetric = symmetric};
}

KvQuantSpec fp8_e4m3_per_token(std::size_t head_dim) {
  return {.code = KvCodeType::fp8_e4m3, .axis = KvScaleAxis::per_token, .group_size = head_dim, .symmetric = true};
}

std::size_t code_bits(KvCodeType code) { return code == KvCodeType::int4 ? 4 : 8; }

std::string describe(const KvQuantSpec& spec) {
  std::ostringstream out;
  out << (spec.code == KvCodeType::int8 ? "int8" : spec.code == KvCodeType::int4 ? "int4" : "fp8 e4m3")
      << (spec.axis == KvScaleAxis::per_token ? " per token, groups of " : " per channel, groups of ")
      << spec.group_size << (spec.axis == KvScaleAxis::per_token ? " channels, " : " tokens, ")
      << (spec.symmetric ? "symmetric" : "asymmetric");
  return out.str();
}

void validate_kv_quant_spec(const char* function, const KvQuantSpec& spec, std::size_t head_dim) {
  require_positive(function, "spec.group_size", spec.group_size);
  if (spec.axis == KvScaleAxis::per_token) {
    require(head_dim % spec.group_size == 0, function, "spec.group_size (", spec.group_size,
            ") must divide head_dim (", head_dim, "): per token, each group is group_size channels of one token");
  }
  require(spec.code != KvCodeType::fp8_e4m3 || spec.symmetric, function,
          "spec.symmetric must be true for fp8_e4m3: FP8 codes are signed and centred on 0");
}

double kv_bytes_per_token(const KvQuantSpec& spec, std::size_t num_kv_heads, std::size_t head_dim) {
  validate_kv_quant_spec("kv_bytes_per_token", spec, head_dim);
  const double elements = static_cast<double>(num_kv_heads) * static_cast<double>(head_dim);
  // g d B / 8 bytes of codes, and 4 bytes per scale (and per minimum) for every G elements.
  const double code_bytes = elements * static_cast<double>(code_bits(spec.code)) / 8.0;
  const double numbers_per_group = spec.symmetric ? 1.0 : 2.0;
  return code_bytes + 4.0 * numbers_per_group * elements / static_cast<double>(spec.group_size);
}

namespace {

// The largest code magnitude Q = 2^{B-1} - 1 (symmetric) and the largest code 2^B - 1 (asymmetric).
int symmetric_max(KvCodeType code) { return code == KvCodeType::int4 ? 7 : 127; }
int asymmetric_max(KvCodeType code) { return code == KvCodeType::int4 ? 15 : 255; }

// Spacing of E4M3 values at |y|: 2^{e-3} in the binade [2^e, 2^{e+1}) (3 mantissa bits), 2^{-9}
// among the subnormals below 2^{-6}.
double e4m3_spacing(double y) {
  const double a = std::fabs(y);
  if (a < std::ldexp(1.0, -6)) return std::ldexp(1.0, -9);
  return std::ldexp(1.0, std::ilogb(a) - 3);
}

void store_code(QuantizedKv& x, std::size_t e, int q) {
  if (x.spec.code != KvCodeType::int4) {
    x.codes[e] = static_cast<std::uint8_t>(q & 0xff);
    return;
  }
  const auto nibble = static_cast<std::uint8_t>(q & 0x0f);
  std::uint8_t& byte = x.codes[e / 2];
  byte = e % 2 == 0 ? static_cast<std::uint8_t>((byte & 0xf0) | nibble)
                    : static_cast<std::uint8_t>((byte & 0x0f) | (nibble << 4));
}

}  // namespace

std::size_t QuantizedKv::group_index(std::size_t h, std::size_t t, std::size_t c) const {
  if (spec.axis == KvScaleAxis::per_token) return (h * seq + t) * (head_dim / spec.group_size) + c / spec.group_size;
  const std::size_t token_groups = (seq + spec.group_size - 1) / spec.group_size;
  return (h * token_groups + t / spec.group_size) * head_dim + c;
}

int QuantizedKv::code(std::size_t h, std::size_t t, std::size_t c) const {
  const std::size_t e = (h * seq + t) * head_dim + c;
  if (spec.code == KvCodeType::fp8_e4m3) return codes[e];
  if (spec.code == KvCodeType::int8) {
    return spec.symmetric ? static_cast<int>(static_cast<std::int8_t>(codes[e])) : static_cast<int>(codes[e]);
  }
  const int nibble = e % 2 == 0 ? codes[e / 2] & 0x0f : codes[e / 2] >> 4;
  return spec.symmetric && nibble >= 8 ? nibble - 16 : nibble;  // two's complement of 4 bits
}

double QuantizedKv::dequantized(std::size_t h, std::size_t t, std::size_t c) const {
  const std::size_t g = group_index(h, t, c);
  const double s = scales[g];
  const int q = code(h, t, c);
  if (spec.code == KvCodeType::fp8_e4m3) return s * e4m3_bits_to_float(static_cast<std::uint8_t>(q));
  // x^ = s q (symmetric) or z + s q (asymmetric)
  return spec.symmetric ? s * q : double{minimums[g]} + s * q;
}

double QuantizedKv::half_step(std::size_t h, std::size_t t, std::size_t c) const {
  const double s = scales[group_index(h, t, c)];
  if (spec.code != KvCodeType::fp8_e4m3) return s / 2;
  return s * e4m3_spacing(e4m3_bits_to_float(static_cast<std::uint8_t>(code(h, t, c)))) / 2;
}

QuantizedKv quantize_kv(const Tensor3& x, const KvQuantSpec& spec) {
  const char* fn = "quantize_kv";
  require_nonempty(fn, "x", x);
  require_finite(fn, "x", x);
  const std::size_t heads = x.shape()[0], seq = x.shape()[1], d = x.shape()[2];
  validate_kv_quant_spec(fn, spec, d);
  QuantizedKv out{.spec = spec, .heads = heads, .seq = seq, .head_dim = d};
  const std::size_t elements = heads * seq * d;
  out.codes.assign(spec.code == KvCodeType::int4 ? (elements + 1) / 2 : elements, 0);
  const bool per_token = spec.axis == KvScaleAxis::per_token;
  const std::size_t groups = per_token ? heads * seq * (d / spec.group_size)
                                       : heads * ((seq + spec.group_size - 1) / spec.group_size) * d;
  out.scales.assign(groups, 0.0f);
  if (!spec.symmetric) out.minimums.assign(groups, 0.0f);

  // The elements of each group, found by walking every element once: (h, t, c) belongs to group_index.
  std::vector<double> lo(groups, HUGE_VAL), hi(groups, -HUGE_VAL), absmax(groups, 0.0);
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t t = 0; t < seq; ++t)
      for (std::size_t c = 0; c < d; ++c) {
        const std::size_t g = out.group_index(h, t, c);
        const double v = x(h, t, c);
        lo[g] = std::min(lo[g], v);
        hi[g] = std::max(hi[g], v);
        absmax[g] = std::max(absmax[g], std::fabs(v));
      }
  // The scales: s = max|x| / Q (symmetric), s = (max - min) / (2^B - 1) and z = min (asymmetric),
  // s = max|x| / 448 (E4M3).
  for (std::size_t g = 0; g < groups; ++g) {
    if (spec.code == KvCodeType::fp8_e4m3) {
      out.scales[g] = static_cast<float>(absmax[g] / kE4m3Max);
    } else if (spec.symmetric) {
      out.scales[g] = static_cast<float>(absmax[g] / symmetric_max(spec.code));
    } else {
      out.scales[g] = static_cast<float>((hi[g] - lo[g]) / asymmetric_max(spec.code));
      out.minimums[g] = static_cast<float>(lo[g]);
    }
  }
  // The codes: q = round(x / s) in [-Q, Q], q = round((x - z) / s) in [0, 2^B - 1], q = e4m3(x / s);
  // a group with s = 0 (all its elements equal: 0 when symmetric, z when not) keeps q = 0.
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t t = 0; t < seq; ++t)
      for (std::size_t c = 0; c < d; ++c) {
        const std::size_t g = out.group_index(h, t, c), e = (h * seq + t) * d + c;
        const double s = out.scales[g], v = x(h, t, c);
        if (s == 0.0) continue;
        if (spec.code == KvCodeType::fp8_e4m3) {
          out.codes[e] = float_to_e4m3_bits(static_cast<float>(v / s));
        } else if (spec.symmetric) {
          const int q_max = symmetric_max(spec.code);
          store_code(out, e, static_cast<int>(std::clamp(std::nearbyint(v / s), -1.0 * q_max, 1.0 * q_max)));
        } else {
          const double z = out.minimums[g];
          const double q_max = asymmetric_max(spec.code);
          store_code(out, e, static_cast<int>(std::clamp(std::nearbyint((v - z) / s), 0.0, q_max)));
        }
      }
  return out;
}

Tensor3 dequantize_kv(const QuantizedKv& x) {
  Tensor3 out = Tensor3::from_shape({x.heads, x.seq, x.head_dim});
  for (std::size_t h = 0; h < x.heads; ++h)
    for (std::size_t t = 0; t < x.seq; ++t)
      for (std::size_t c = 0; c < x.head_dim; ++c) out(h, t, c) = static_cast<float>(x.dequantized(h, t, c));
  return out;
}

}  // namespace tvlab
