#include "tvlab/ref/block_quant.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "tvlab/core/dtype.hpp"
#include "tvlab/core/error.hpp"

namespace tvlab::ref {
namespace {

constexpr std::size_t kBlock = 32;

// fp16 numbers are stored little-endian, as ggml writes them on every machine it runs on.
void store_fp16(float value, std::uint8_t* out) {
  const std::uint16_t bits = float_to_fp16_bits(value);
  out[0] = static_cast<std::uint8_t>(bits & 0xFF);
  out[1] = static_cast<std::uint8_t>(bits >> 8);
}

float load_fp16(const std::uint8_t* in) {
  return fp16_bits_to_float(static_cast<std::uint16_t>(in[0] | (in[1] << 8)));
}

void store_u32(std::uint32_t value, std::uint8_t* out) {
  for (int b = 0; b < 4; ++b) out[b] = static_cast<std::uint8_t>(value >> (8 * b));
}

std::uint32_t load_u32(const std::uint8_t* in) {
  return static_cast<std::uint32_t>(in[0]) | static_cast<std::uint32_t>(in[1]) << 8 |
         static_cast<std::uint32_t>(in[2]) << 16 | static_cast<std::uint32_t>(in[3]) << 24;
}

// The element of largest magnitude, with its sign (the first one on a tie).
float signed_absmax(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (std::size_t j = 0; j < kBlock; ++j)
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  return max;
}

// The symmetric 4- and 5-bit types: d = x_max / -(2^(bits-1)), q_j = min(2^bits - 1,
// trunc(x_j / d + 2^(bits-1) + 0.5)). Returns the codes and the float d.
float symmetric_codes(const float* x, int bits, int* q) {
  const float half = static_cast<float>(1 << (bits - 1));
  const int top = (1 << bits) - 1;
  const float d = signed_absmax(x) / -half;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (std::size_t j = 0; j < kBlock; ++j)
    q[j] = std::min(top, static_cast<int>(static_cast<std::int8_t>(x[j] * id + (half + 0.5f))));
  return d;
}

// The asymmetric types: m = min_j x_j, d = (max_j x_j - m) / (2^bits - 1),
// q_j = trunc((x_j - m) / d + 0.5), at most 2^bits - 1. Returns d and m.
void asymmetric_codes(const float* x, int bits, int* q, float& d, float& m) {
  float min = FLT_MAX, max = -FLT_MAX;
  for (std::size_t j = 0; j < kBlock; ++j) min = std::min(min, x[j]), max = std::max(max, x[j]);
  const int top = (1 << bits) - 1;
  d = (max - min) / static_cast<float>(top);
  m = min;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (std::size_t j = 0; j < kBlock; ++j)
    q[j] = std::min(top, static_cast<int>(static_cast<std::uint8_t>((x[j] - min) * id + 0.5f)));
}

// Byte j: the low 4 bits of q_j, then those of q_{j+16} in the high half.
void pack_nibbles(const int* q, std::uint8_t* out) {
  for (std::size_t j = 0; j < kBlock / 2; ++j)
    out[j] = static_cast<std::uint8_t>((q[j] & 0x0F) | ((q[j + kBlock / 2] & 0x0F) << 4));
}

// Bit j: the fifth bit (value 16) of q_j.
std::uint32_t fifth_bits(const int* q) {
  std::uint32_t qh = 0;
  for (std::size_t j = 0; j < kBlock; ++j) qh |= static_cast<std::uint32_t>((q[j] >> 4) & 1) << j;
  return qh;
}

// The code of element j from the nibbles (and the fifth bits, when `qh` is given).
int code(const std::uint8_t* nibbles, const std::uint32_t* qh, std::size_t j) {
  const int low = j < kBlock / 2 ? nibbles[j] & 0x0F : nibbles[j - kBlock / 2] >> 4;
  return qh ? low | static_cast<int>(((*qh >> j) & 1) << 4) : low;
}

}  // namespace

void quantize_block_q8_0(const float* x, std::uint8_t* block) {
  // d = max_j |x_j| / 127, q_j = round(x_j / d) (half away from zero), via id = 1 / d
  float amax = 0.0f;
  for (std::size_t j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_fp16(d, block);
  for (std::size_t j = 0; j < kBlock; ++j)
    block[2 + j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(std::round(x[j] * id)));
}

void quantize_block_q4_0(const float* x, std::uint8_t* block) {
  int q[kBlock];
  store_fp16(symmetric_codes(x, 4, q), block);
  pack_nibbles(q, block + 2);
}

void quantize_block_q4_1(const float* x, std::uint8_t* block) {
  int q[kBlock];
  float d = 0.0f, m = 0.0f;
  asymmetric_codes(x, 4, q, d, m);
  store_fp16(d, block);
  store_fp16(m, block + 2);
  pack_nibbles(q, block + 4);
}

void quantize_block_q5_0(const float* x, std::uint8_t* block) {
  int q[kBlock];
  store_fp16(symmetric_codes(x, 5, q), block);
  store_u32(fifth_bits(q), block + 2);
  pack_nibbles(q, block + 6);
}

void quantize_block_q5_1(const float* x, std::uint8_t* block) {
  int q[kBlock];
  float d = 0.0f, m = 0.0f;
  asymmetric_codes(x, 5, q, d, m);
  store_fp16(d, block);
  store_fp16(m, block + 2);
  store_u32(fifth_bits(q), block + 4);
  pack_nibbles(q, block + 8);
}

void dequantize_block(GgmlType type, const std::uint8_t* block, float* y) {
  const float d = load_fp16(block);
  switch (type) {
    case GgmlType::q8_0:  // x^_j = d q_j
      for (std::size_t j = 0; j < kBlock; ++j) y[j] = d * static_cast<float>(static_cast<std::int8_t>(block[2 + j]));
      return;
    case GgmlType::q4_0:  // x^_j = d (q_j - 8)
      for (std::size_t j = 0; j < kBlock; ++j) y[j] = d * static_cast<float>(code(block + 2, nullptr, j) - 8);
      return;
    case GgmlType::q4_1: {  // x^_j = d q_j + m
      const float m = load_fp16(block + 2);
      for (std::size_t j = 0; j < kBlock; ++j) y[j] = d * static_cast<float>(code(block + 4, nullptr, j)) + m;
      return;
    }
    case GgmlType::q5_0: {  // x^_j = d (q_j - 16)
      const std::uint32_t qh = load_u32(block + 2);
      for (std::size_t j = 0; j < kBlock; ++j) y[j] = d * static_cast<float>(code(block + 6, &qh, j) - 16);
      return;
    }
    case GgmlType::q5_1: {  // x^_j = d q_j + m
      const float m = load_fp16(block + 2);
      const std::uint32_t qh = load_u32(block + 4);
      for (std::size_t j = 0; j < kBlock; ++j) y[j] = d * static_cast<float>(code(block + 8, &qh, j)) + m;
      return;
    }
    default: break;
  }
  fail("dequantize_block", "type (", type_name(type), ") is not a block type: use one of quantized_types()");
}

double largest_quantizable(GgmlType type) {
  constexpr double kFp16Max = 65504.0;  // fp16's largest finite value: the largest scale a block can store
  switch (type) {
    case GgmlType::q8_0: return 127.0 * kFp16Max;  // d = max|x| / 127
    case GgmlType::q4_0: return 8.0 * kFp16Max;    // d = x_max / -8
    case GgmlType::q5_0: return 16.0 * kFp16Max;   // d = x_max / -16
    default: return kFp16Max;  // the minimum m is stored in fp16 too (and then d = range / 15 or 31 fits)
  }
}

void validate_quantize(const char* function, const Tensor2& x, GgmlType type, bool scan_values) {
  require(std::find(quantized_types().begin(), quantized_types().end(), type) != quantized_types().end(), function,
          "type (", type_name(type), ") is not a block type: Q8_0, Q5_1, Q5_0, Q4_1 or Q4_0");
  require_nonempty(function, "x", x);
  require_block_multiple(function, "x's row length", x.shape()[1], type);
  if (!scan_values) return;
  // beyond this magnitude the block's fp16 scale would be infinite (ggml would store inf, and the
  // values would come back as inf or NaN)
  if (require_finite_max_abs(function, "x", x) > largest_quantizable(type))
    for (std::size_t i = 0; i < x.size(); ++i)
      if (std::fabs(x.data()[i]) > largest_quantizable(type))
        fail(function, "x has a value of magnitude ", std::fabs(x.data()[i]), " at (row ", i / x.shape()[1], ", col ",
             i % x.shape()[1], "); ", type_name(type), " stores its scales in fp16 (at most 65504), so |x| must not exceed ",
             largest_quantizable(type), ": scale the tensor down first");
}

QuantizedMatrix quantize(const Tensor2& x, GgmlType type) {
  validate_quantize("quantize", x, type);
  QuantizedMatrix q{type, x.shape()[0], x.shape()[1], {}};
  q.bytes.resize(q.rows * q.row_bytes());
  for (std::size_t r = 0; r < q.rows; ++r)
    for (std::size_t b = 0; b < q.cols / kBlock; ++b) {
      const float* block_in = &x(r, b * kBlock);
      std::uint8_t* block_out = q.row(r) + b * block_bytes(type);
      switch (type) {
        case GgmlType::q8_0: quantize_block_q8_0(block_in, block_out); break;
        case GgmlType::q4_0: quantize_block_q4_0(block_in, block_out); break;
        case GgmlType::q4_1: quantize_block_q4_1(block_in, block_out); break;
        case GgmlType::q5_0: quantize_block_q5_0(block_in, block_out); break;
        case GgmlType::q5_1: quantize_block_q5_1(block_in, block_out); break;
        default: break;
      }
    }
  return q;
}

Tensor2 dequantize(const QuantizedMatrix& q) {
  validate_quantized("dequantize", q);
  require(q.type != GgmlType::f32 && q.type != GgmlType::f16, "dequantize", "q.type (", type_name(q.type),
          ") is not a block type");
  Tensor2 y = Tensor2::from_shape({q.rows, q.cols});
  for (std::size_t r = 0; r < q.rows; ++r)
    for (std::size_t b = 0; b < q.cols / kBlock; ++b)
      dequantize_block(q.type, q.row(r) + b * block_bytes(q.type), &y(r, b * kBlock));
  return y;
}

}  // namespace tvlab::ref
