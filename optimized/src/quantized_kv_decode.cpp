#include "tvlab/opt/quantized_kv_decode.hpp"

#include <array>
#include <cstdint>
#include <cstring>

#include "tvlab/core/dtype.hpp"
#include "tvlab/core/error.hpp"

#include "detail/decode_checks.hpp"
#include "detail/split_decode.hpp"

namespace tvlab::opt {
namespace {

// Positions per block when a block is dequantized into a buffer: 32 rows of d = 128 floats are
// 16 KiB, so the keys' buffer is still in L1 when the scores read it (and the values' buffer when
// P V reads it). The micro-kernel path needs whole micro-kernel widths: 64 positions.
constexpr std::size_t kBlockDequantized = 32, kBlockDequantizedMicroKernel = 64;
static_assert(kBlockDequantized % detail::kLanes == 0 && kBlockDequantizedMicroKernel % detail::kTileCols == 0,
              "a block is a whole number of registers (and of micro-kernel widths on that path)");

// ------------------------------------------------------------------------------------------ bf16

// Rows of a bf16 cache widened to float: a bf16 value's bits are the top 16 bits of the float it
// stands for, so x = bits << 16, exactly.
struct Bf16Rows {
  const Bf16Kv& cache;

  bool needs_buffer(std::size_t) const { return true; }
  detail::RowBlock rows(std::size_t kv, std::size_t first, std::size_t count, std::size_t width, float* buffer) const {
    const std::size_t d = cache.head_dim;
    const std::uint16_t* bits = cache.bits.data() + (kv * cache.capacity + first) * d;
    for (std::size_t c = 0; c < count; ++c) {
      const std::uint16_t* row = bits + c * d;
      float* out = buffer + c * width;
#pragma omp simd
      for (std::size_t e = 0; e < d; ++e) {
        const std::uint32_t widened = static_cast<std::uint32_t>(row[e]) << 16;
        std::memcpy(out + e, &widened, sizeof widened);
      }
    }
    return {buffer, width};
  }
};

// ------------------------------------------------------------------------------------- quantized

// The 256 E4M3 values by their bits: one table lookup per code instead of decoding exponent and
// mantissa (NaN bits give NaN, never produced by quantize_kv).
const std::array<float, 256>& e4m3_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> values{};
    for (std::size_t bits = 0; bits < 256; ++bits) values[bits] = e4m3_bits_to_float(static_cast<std::uint8_t>(bits));
    return values;
  }();
  return table;
}

// Rows of a quantized cache dequantized to float, one row of d channels at a time: first the codes
// as numbers q (sign-extended INT8, INT4 nibbles, E4M3 values), then x^ = s q or z + s q with the
// scales of the row's groups. Both passes are short loops over the row in L1 that the compiler
// turns into vector conversions and FMAs.
class QuantizedRows {
 public:
  explicit QuantizedRows(const QuantizedKv& x)
      : x_(x), token_groups_((x.seq + x.spec.group_size - 1) / x.spec.group_size), e4m3_(e4m3_values()) {}

  bool needs_buffer(std::size_t) const { return true; }
  detail::RowBlock rows(std::size_t kv, std::size_t first, std::size_t count, std::size_t width, float* buffer) const {
    for (std::size_t c = 0; c < count; ++c) dequantize_row(kv, first + c, buffer + c * width);
    return {buffer, width};
  }

 private:
  void dequantize_row(std::size_t h, std::size_t t, float* out) const {
    const std::size_t d = x_.head_dim, row = h * x_.seq + t;
    const std::uint8_t* codes = x_.codes.data() + (x_.spec.code == KvCodeType::int4 ? row * d / 2 : row * d);
    // The codes as numbers q.
    switch (x_.spec.code) {
      case KvCodeType::int8:
        if (x_.spec.symmetric) {
#pragma omp simd
          for (std::size_t e = 0; e < d; ++e) out[e] = static_cast<float>(static_cast<std::int8_t>(codes[e]));
        } else {
#pragma omp simd
          for (std::size_t e = 0; e < d; ++e) out[e] = static_cast<float>(codes[e]);
        }
        break;
      case KvCodeType::int4: {
        // Element 2i in byte i's low nibble, 2i + 1 in its high nibble; symmetric codes are 4-bit
        // two's complement, sign-extended as (n XOR 8) - 8.
        const int sign = x_.spec.symmetric ? 8 : 0;
#pragma omp simd
        for (std::size_t i = 0; i < d / 2; ++i) {
          out[2 * i] = static_cast<float>(((codes[i] & 0x0f) ^ sign) - sign);
          out[2 * i + 1] = static_cast<float>(((codes[i] >> 4) ^ sign) - sign);
        }
        break;
      }
      case KvCodeType::fp8_e4m3:
        for (std::size_t e = 0; e < d; ++e) out[e] = e4m3_[codes[e]];
        break;
    }
    // x^ = s q (symmetric) or z + s q (asymmetric), with the scale (and minimum) of each element's group.
    const float* minimums = x_.minimums.data();
    if (x_.spec.axis == KvScaleAxis::per_token) {
      // Per token: the row's d / G groups of G consecutive channels, one scale each.
      const std::size_t size = x_.spec.group_size, first_group = row * (d / size);
      for (std::size_t group = 0; group < d / size; ++group) {
        const float s = x_.scales[first_group + group], z = x_.spec.symmetric ? 0.0f : minimums[first_group + group];
        float* part = out + group * size;
#pragma omp simd
        for (std::size_t e = 0; e < size; ++e) part[e] = z + s * part[e];
      }
    } else {
      // Per channel: the row of d scales of this token's group of G tokens.
      const std::size_t first_group = (h * token_groups_ + t / x_.spec.group_size) * d;
      const float* s = x_.scales.data() + first_group;
      if (x_.spec.symmetric) {
#pragma omp simd
        for (std::size_t e = 0; e < d; ++e) out[e] = s[e] * out[e];
      } else {
        const float* z = minimums + first_group;
#pragma omp simd
        for (std::size_t e = 0; e < d; ++e) out[e] = z[e] + s[e] * out[e];
      }
    }
  }

  const QuantizedKv& x_;
  std::size_t token_groups_;  // per channel: groups of G tokens along the sequence
  const std::array<float, 256>& e4m3_;
};

// The checks of ref::quantized_kv_decode_attention on one quantized tensor, and the one spec the
// kernel does not take: INT4 with an odd head_dim, whose tokens' codes do not start on a byte.
void validate_quantized(const char* function, const char* name, const QuantizedKv& x) {
  require(x.heads > 0 && x.seq > 0 && x.head_dim > 0, function, name, " is empty (", x.heads, " heads, ", x.seq,
          " tokens, head_dim ", x.head_dim, "): quantize a non-empty tensor with quantize_kv");
  validate_kv_quant_spec(function, x.spec, x.head_dim);
  require(x.spec.code != KvCodeType::int4 || x.head_dim % 2 == 0, function, name, " has int4 codes and head_dim ",
          x.head_dim, ", which must be even for this kernel: each token's codes must start on a byte");
  const std::size_t elements = x.heads * x.seq * x.head_dim;
  const std::size_t code_bytes = x.spec.code == KvCodeType::int4 ? (elements + 1) / 2 : elements;
  const std::size_t groups = x.group_index(x.heads - 1, x.seq - 1, x.head_dim - 1) + 1;
  require(x.codes.size() == code_bytes && x.scales.size() == groups && x.minimums.size() == (x.spec.symmetric ? 0 : groups),
          function, name, " has ", x.codes.size(), " code bytes, ", x.scales.size(), " scales and ", x.minimums.size(),
          " minimums; its shape and spec need ", code_bytes, ", ", groups, " and ", x.spec.symmetric ? 0 : groups);
}

}  // namespace

ref::GqaDecodeOutput bf16_kv_decode_attention(const Tensor2& q, const Bf16Kv& k_cache, const Bf16Kv& v_cache,
                                              std::size_t length, std::optional<double> scale, std::size_t splits) {
  constexpr const char* function = "bf16_kv_decode_attention";
  validate_bf16_kv(function, "k_cache", k_cache);
  validate_bf16_kv(function, "v_cache", v_cache);
  const detail::SplitDecodeShape shape = detail::validate_split_decode(
      function, q, "k_cache", {k_cache.heads, k_cache.capacity, k_cache.head_dim}, "v_cache",
      {v_cache.heads, v_cache.capacity, v_cache.head_dim}, length, scale, splits, kBlockDequantized,
      kBlockDequantizedMicroKernel);
  ref::GqaDecodeOutput result{Tensor2::from_shape({shape.heads, shape.d_v}), Tensor1::from_shape({shape.heads})};
  detail::split_k_decode(q.data(), shape, Bf16Rows{k_cache}, Bf16Rows{v_cache}, result.out.data(), result.lse.data());
  return result;
}

Tensor2 quantized_kv_decode_attention(const Tensor2& q, const QuantizedKv& k, const QuantizedKv& v, std::size_t length,
                                      std::optional<double> scale, std::size_t splits) {
  constexpr const char* function = "quantized_kv_decode_attention";
  validate_quantized(function, "k", k);
  validate_quantized(function, "v", v);
  require(v.heads == k.heads && v.seq == k.seq && v.head_dim == k.head_dim, function, "v has shape [", v.heads, ", ",
          v.seq, ", ", v.head_dim, "], expected [", k.heads, ", ", k.seq, ", ", k.head_dim, "] (the shape of k)");
  const detail::SplitDecodeShape shape =
      detail::validate_split_decode(function, q, "k", {k.heads, k.seq, k.head_dim}, "v", {v.heads, v.seq, v.head_dim},
                                    length, scale, splits, kBlockDequantized, kBlockDequantizedMicroKernel);
  Tensor2 out = Tensor2::from_shape({shape.heads, shape.d_v});
  std::vector<float> lse(shape.heads);
  detail::split_k_decode(q.data(), shape, QuantizedRows{k}, QuantizedRows{v}, out.data(), lse.data());
  return out;
}

}  // namespace tvlab::opt
