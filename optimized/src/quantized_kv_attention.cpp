#include "tvlab/opt/quantized_kv_attention.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "tvlab/core/error.hpp"

#include "detail/code_kernels.hpp"
#include "detail/converted_rows.hpp"
#include "detail/decode_checks.hpp"
#include "detail/kv_dequant_rows.hpp"
#include "detail/split_decode.hpp"

namespace tvlab::opt {
namespace {

// Rows of a quantized cache dequantized to float, one row of d channels at a time, in one pass:
// x^ = z + s q with q the element's code as a number (a sign-extended INT8, an INT4 nibble, an
// E4M3 value) and s, z its group's scale and minimum (z = 0 when symmetric). Each format's loop is
// a short loop over the row that the compiler turns into vector conversions and FMAs, 16 codes at
// a time (simdlen(16): left alone, the vectoriser sizes its vectors by the 1-byte codes, 64 per
// AVX-512 register, and a group of 32 codes would run in the scalar remainder loop).
class QuantizedRows {
 public:
  explicit QuantizedRows(const QuantizedKv& x)
      : x_(x), token_groups_((x.seq + x.spec.group_size - 1) / x.spec.group_size) {}

  bool needs_buffer(std::size_t) const { return true; }
  detail::RowBlock rows(std::size_t kv, std::size_t first, std::size_t count, std::size_t width, float* buffer) const {
    for (std::size_t c = 0; c < count; ++c) dequantize_row(kv, first + c, buffer + c * width);
    return {buffer, width};
  }

 private:
  void dequantize_row(std::size_t h, std::size_t t, float* out) const {
    const std::size_t d = x_.head_dim, row = h * x_.seq + t;
    const bool int4 = x_.spec.code == KvCodeType::int4;
    const std::uint8_t* codes = x_.codes.data() + (int4 ? row * d / 2 : row * d);
    switch (x_.spec.code) {
      case KvCodeType::int8:
        if (x_.spec.symmetric)
          scale_codes(h, t, out, [codes](std::size_t e) { return static_cast<float>(static_cast<std::int8_t>(codes[e])); });
        else
          scale_codes(h, t, out, [codes](std::size_t e) { return static_cast<float>(codes[e]); });
        break;
      case KvCodeType::int4: {
        // Element e in byte e/2, the low nibble when e is even; symmetric codes are 4-bit two's
        // complement, sign-extended as (n XOR 8) - 8.
        const int sign = x_.spec.symmetric ? 8 : 0;
        if (x_.spec.axis == KvScaleAxis::per_token && (256 % x_.spec.group_size == 0 || x_.head_dim <= 256) &&
            x_.spec.group_size % 2 == 0) {
          dequantize_int4_pairs(h, t, codes, sign, out);
          break;
        }
        scale_codes(h, t, out, [codes, sign](std::size_t e) {
          const int nibble = (codes[e / 2] >> (4 * (e % 2))) & 0x0f;
          return static_cast<float>((nibble ^ sign) - sign);
        });
        break;
      }
      case KvCodeType::fp8_e4m3:
        scale_codes(h, t, out, [codes](std::size_t e) { return detail::e4m3_value(codes[e]); });
        break;
    }
  }

  // out[c] = z + s q_c over `size` codes of one byte each (sign-extended from 4 bits when sign = 8);
  // kSize, when not 0, is `size` known at compile time.
  // (With the size known the compiler picks its vectors to fit it; otherwise simdlen(16).)
  template <std::size_t kSize>
  static void dequantize_small_codes(const std::uint8_t* q, std::size_t size, float s, float z, int sign, float* out) {
    if constexpr (kSize != 0) {
#pragma omp simd
      for (std::size_t c = 0; c < kSize; ++c) out[c] = z + s * static_cast<float>((q[c] ^ sign) - sign);
    } else {
#pragma omp simd simdlen(16)
      for (std::size_t c = 0; c < size; ++c) out[c] = z + s * static_cast<float>((q[c] ^ sign) - sign);
    }
  }

  // INT4 per token with groups of an even size: byte i of the row holds elements 2i (low nibble)
  // and 2i + 1 (high nibble). Writing the two floats of a byte to two places defeats the vectoriser
  // (interleaved stores), so the row's nibbles are first spread into 16-bit words, word i = low
  // nibble | high nibble << 8, whose bytes in memory (little-endian) are the codes of elements 2i,
  // 2i + 1 in order, one byte each; then each group is dequantized as INT8 codes are.
  void dequantize_int4_pairs(std::size_t h, std::size_t t, const std::uint8_t* codes, int sign, float* out) const {
    static_assert(std::endian::native == std::endian::little, "word i's low byte is element 2i");
    constexpr std::size_t kWords = 128;  // head_dim up to 256 in one pass
    const std::size_t d = x_.head_dim, size = x_.spec.group_size, groups = d / size, first_group = (h * x_.seq + t) * groups;
    std::uint16_t words[kWords];
    const auto* nibbles = reinterpret_cast<const std::uint8_t*>(words);  // a byte view, allowed for any object
    for (std::size_t e0 = 0; e0 < d; e0 += 2 * kWords) {  // whole groups at a time: 2 kWords is a multiple of size
      const std::size_t count = std::min(kWords, (d - e0) / 2);
#pragma omp simd simdlen(16)
      for (std::size_t i = 0; i < count; ++i)
        words[i] = static_cast<std::uint16_t>((codes[e0 / 2 + i] & 0x0f) | ((codes[e0 / 2 + i] & 0xf0) << 4));
      for (std::size_t e = e0; e < e0 + 2 * count; e += size) {
        const std::size_t group = first_group + e / size;
        const float s = x_.scales[group], z = x_.spec.symmetric ? 0.0f : x_.minimums[group];
        // Groups of 32, the common size, with a trip count the compiler knows: two whole vectors.
        if (size == 32)
          dequantize_small_codes<32>(nibbles + (e - e0), size, s, z, sign, out + e);
        else
          dequantize_small_codes<0>(nibbles + (e - e0), size, s, z, sign, out + e);
      }
    }
  }

  // out[e] = z + s q(e) over the row (h, t), with the scale (and minimum) of each element's group.
  template <class Code>
  void scale_codes(std::size_t h, std::size_t t, float* out, Code q) const {
    const std::size_t d = x_.head_dim;
    const bool symmetric = x_.spec.symmetric;
    if (x_.spec.axis == KvScaleAxis::per_token) {
      // Per token: the row's d / G groups of G consecutive channels, one scale (and minimum) each.
      const std::size_t size = x_.spec.group_size, first_group = (h * x_.seq + t) * (d / size);
      if (size == d) {  // one scale per token and head: one loop over the row, as wide as the vectoriser likes
        const float s = x_.scales[first_group], z = symmetric ? 0.0f : x_.minimums[first_group];
#pragma omp simd
        for (std::size_t e = 0; e < d; ++e) out[e] = z + s * q(e);
        return;
      }
      for (std::size_t group = 0; group < d / size; ++group) {
        const float s = x_.scales[first_group + group], z = symmetric ? 0.0f : x_.minimums[first_group + group];
        const std::size_t e0 = group * size;
#pragma omp simd simdlen(16)
        for (std::size_t e = e0; e < e0 + size; ++e) out[e] = z + s * q(e);
      }
      return;
    }
    // Per channel: the row of d scales (and minimums) of this token's group of G tokens.
    const std::size_t first_group = (h * token_groups_ + t / x_.spec.group_size) * d;
    const float* s = x_.scales.data() + first_group;
    if (symmetric) {
#pragma omp simd
      for (std::size_t e = 0; e < d; ++e) out[e] = s[e] * q(e);
    } else {
      const float* z = x_.minimums.data() + first_group;
#pragma omp simd
      for (std::size_t e = 0; e < d; ++e) out[e] = z[e] + s[e] * q(e);
    }
  }

  const QuantizedKv& x_;
  std::size_t token_groups_;  // per channel: groups of G tokens along the sequence
};

// Rows of a cache with one scale per token and kv head, symmetric (INT8 per token, FP8 E4M3 per
// token), handed out as their codes and scales for code_kernels.hpp's kernels, which read the codes
// where they lie: \hat x_t = s_t c_t, s_t applied to each dot product and folded into each softmax
// weight. Measured at 32K positions, 32 query heads, g = 8, d = 128, 2 threads (medians of 5
// rounds): INT8 4.5 ms and FP8 6.0 ms against the float cache's 8.7 ms; through the buffer
// (QuantizedRows) they took 9.8 and 10.6 ms against 8.1 ms, slower than the float cache despite
// reading 4x fewer bytes. What is left is arithmetic more than memory: beside its four FMAs,
// each register of codes costs a sign extension and a conversion (INT8), and for E4M3 a shift, two
// masks, a compare and select for the NaN codes and a multiplication.
template <class CodeFormat>
class PerTokenCodeRows {
 public:
  using Codes = CodeFormat;
  PerTokenCodeRows(const QuantizedKv& x, std::size_t length) : x_(x), length_(length) {}

  bool needs_buffer(std::size_t) const { return false; }
  /// Positions [first, first + count) of kv head kv: row (kv, t) holds codes [d] from byte
  /// (kv seq + t) d, and its one scale is scales[kv seq + t].
  detail::CodeBlock code_rows(std::size_t kv, std::size_t first, std::size_t count) const {
    const std::size_t d = x_.head_dim, row = kv * x_.seq + first;
    const std::uint8_t* codes = x_.codes.data() + row * d;
    const bool ahead = first + detail::kPrefetchDistance + count <= length_;
    return {codes, d, x_.scales.data() + row, ahead ? codes + detail::kPrefetchDistance * d : nullptr};
  }

 private:
  const QuantizedKv& x_;
  std::size_t length_;
};

// Whether the kernels over codes read x: one scale per token and kv head, symmetric, INT8 or FP8
// codes, and a head_dim of whole registers (the kernels have no tail for the rest).
bool codes_read_in_place(const QuantizedKv& x) {
  return x.spec.axis == KvScaleAxis::per_token && x.spec.group_size == x.head_dim && x.spec.symmetric &&
         (x.spec.code == KvCodeType::int8 || x.spec.code == KvCodeType::fp8_e4m3) && x.head_dim % detail::kLanes == 0;
}

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

Tensor2 quantized_kv_decode_attention_split_k(const Tensor2& q, const QuantizedKv& k, const QuantizedKv& v,
                                              std::size_t length, std::optional<double> scale, std::size_t splits) {
  constexpr const char* function = "quantized_kv_decode_attention";
  validate_quantized(function, "k", k);
  validate_quantized(function, "v", v);
  require(v.heads == k.heads && v.seq == k.seq && v.head_dim == k.head_dim, function, "v has shape [", v.heads, ", ",
          v.seq, ", ", v.head_dim, "], expected [", k.heads, ", ", k.seq, ", ", k.head_dim, "] (the shape of k)");
  // INT8 or FP8 per token in both (the same code for keys and values): the codes read in place,
  // requested a whole block at a time (no buffer to keep in L1). Every other spec: converted into a
  // buffer 32 positions at a time.
  const bool in_place = codes_read_in_place(k) && codes_read_in_place(v) && k.spec.code == v.spec.code;
  const detail::SplitDecodeShape shape =
      detail::validate_split_decode(function, q, "k", {k.heads, k.seq, k.head_dim}, "v", {v.heads, v.seq, v.head_dim},
                                    length, scale, splits, in_place ? 0 : detail::kConvertedPiece);
  Tensor2 out = Tensor2::from_shape({shape.heads, shape.d_v});
  std::vector<float> lse(shape.heads);
  if (in_place && k.spec.code == KvCodeType::int8)
    detail::split_k_decode(q.data(), shape, PerTokenCodeRows<detail::Int8Codes>{k, shape.length},
                           PerTokenCodeRows<detail::Int8Codes>{v, shape.length}, out.data(), lse.data());
  else if (in_place)
    detail::split_k_decode(q.data(), shape, PerTokenCodeRows<detail::E4m3Codes>{k, shape.length},
                           PerTokenCodeRows<detail::E4m3Codes>{v, shape.length}, out.data(), lse.data());
  else
    detail::split_k_decode(q.data(), shape, QuantizedRows{k}, QuantizedRows{v}, out.data(), lse.data());
  return out;
}

Tensor2 quantized_kv_decode_attention(const Tensor2& q, const QuantizedKv& k, const QuantizedKv& v,
                                      std::optional<double> scale) {
  return quantized_kv_decode_attention_split_k(q, k, v, k.seq, scale, 0);
}

}  // namespace tvlab::opt
