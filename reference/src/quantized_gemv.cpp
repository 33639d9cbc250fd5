#include "tvlab/ref/quantized_gemv.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "tvlab/core/error.hpp"
#include "tvlab/ref/block_quant.hpp"

namespace tvlab::ref {
namespace {

constexpr std::size_t kBlock = 32;
constexpr std::size_t kSuper = 256;  // QK_K

// Little-endian stores of Q8_K's float d and int16 sums (the layout of a GGUF file, on any host).
void write_le(std::uint32_t bits, std::size_t bytes, std::uint8_t* out) {
  for (std::size_t i = 0; i < bytes; ++i) out[i] = static_cast<std::uint8_t>(bits >> (8 * i));
}

std::uint32_t read_le(const std::uint8_t* in, std::size_t bytes) {
  std::uint32_t bits = 0;
  for (std::size_t i = 0; i < bytes; ++i) bits |= static_cast<std::uint32_t>(in[i]) << (8 * i);
  return bits;
}

// One Q8_K super-block's int8 code l, its float d and the sum of its codes l in [16 g, 16 g + 16).
std::int8_t q8_k_code(const std::uint8_t* block, std::size_t l) { return static_cast<std::int8_t>(block[4 + l]); }
float q8_k_scale(const std::uint8_t* block) { return std::bit_cast<float>(read_le(block, 4)); }
int q8_k_group_sum(const std::uint8_t* block, std::size_t g) {
  return static_cast<std::int16_t>(read_le(block + 4 + kSuper + 2 * g, 2));
}

// sum over the row's blocks of the Q8_0 x Q8_0 or Q4_0 x Q8_0 products, in block order
float dot_32_weight_blocks(GgmlType type, const std::uint8_t* row, const std::vector<std::uint8_t>& xq, std::size_t cols) {
  const std::size_t w_bytes = block_bytes(type), x_bytes = block_bytes(GgmlType::q8_0);
  float sum = 0.0f;
  for (std::size_t b = 0; b < cols / kBlock; ++b) {
    const std::uint8_t* wb = row + b * w_bytes;
    const std::uint8_t* xb = xq.data() + b * x_bytes;
    // sumi = sum_j w_j x_j, exact in integers
    std::int32_t sumi = 0;
    for (std::size_t j = 0; j < kBlock; ++j) sumi += block_code(type, wb, j) * static_cast<std::int8_t>(xb[2 + j]);
    // the scales, once per block: sumi (d_w d_x) for Q8_0, (sumi d_w) d_x for Q4_0
    const float d_w = read_fp16(wb), d_x = read_fp16(xb);
    if (type == GgmlType::q8_0)
      sum += static_cast<float>(sumi) * (d_w * d_x);
    else
      sum += static_cast<float>(sumi) * d_w * d_x;
  }
  return sum;
}

// sum over the row's super-blocks of the Q4_K x Q8_K products, in super-block order
float dot_q4_k_blocks(const std::uint8_t* row, const std::vector<std::uint8_t>& xq, std::size_t cols) {
  const std::size_t w_bytes = block_bytes(GgmlType::q4_K);
  float sum = 0.0f;
  for (std::size_t b = 0; b < cols / kSuper; ++b) {
    const std::uint8_t* wb = row + b * w_bytes;
    const std::uint8_t* xb = xq.data() + b * kQ8KBlockBytes;
    // S = sum_j s_j sum_{l in j} q_l x_l and M = sum_j m_j sum_{l in j} x_l, exact in integers
    std::int32_t scaled = 0, offsets = 0;
    for (std::size_t j = 0; j < kSuper / kBlock; ++j) {
      int s = 0, m = 0;
      q4_k_scale_min(j, wb + 4, s, m);
      // sub-block j: run j / 2 of the nibbles, low halves for even j, high halves for odd j
      const std::uint8_t* run = wb + 16 + 32 * (j / 2);
      std::int32_t dot = 0;
      for (std::size_t l = 0; l < kBlock; ++l) {
        const int q = j % 2 == 0 ? run[l] & 0x0F : run[l] >> 4;
        dot += q * q8_k_code(xb, kBlock * j + l);
      }
      scaled += s * dot;
      offsets += m * (q8_k_group_sum(xb, 2 * j) + q8_k_group_sum(xb, 2 * j + 1));
    }
    // y <- (y + (d d_x) S) - (dmin d_x) M
    const float d_x = q8_k_scale(xb);
    sum += read_fp16(wb) * d_x * static_cast<float>(scaled);
    sum -= read_fp16(wb + 2) * d_x * static_cast<float>(offsets);
  }
  return sum;
}

}  // namespace

void validate_quantized_gemv(const char* function, const QuantizedMatrix& w, const Tensor1& x) {
  validate_quantized(function, w);
  require(w.type == GgmlType::q8_0 || w.type == GgmlType::q4_0 || w.type == GgmlType::q4_K, function, "w.type (",
          type_name(w.type), ") must be Q8_0, Q4_0 or Q4_K");
  require(x.size() == w.cols, function, "x has ", x.size(), " values, expected w.cols = ", w.cols);
  require_finite(function, "x", x);
}

std::vector<std::uint8_t> quantize_activations_q8_0(const Tensor1& x) {
  require_block_multiple("quantize_activations_q8_0", "x's length", x.size(), GgmlType::q8_0);
  require_finite("quantize_activations_q8_0", "x", x);
  std::vector<std::uint8_t> blocks(x.size() / kBlock * block_bytes(GgmlType::q8_0));
  for (std::size_t b = 0; b < x.size() / kBlock; ++b)
    quantize_block_q8_0(x.data() + b * kBlock, blocks.data() + b * block_bytes(GgmlType::q8_0));
  return blocks;
}

std::vector<std::uint8_t> quantize_activations_q8_k(const Tensor1& x) {
  require(x.size() % kSuper == 0, "quantize_activations_q8_k", "x's length (", x.size(), ") must be a multiple of ", kSuper);
  require_finite("quantize_activations_q8_k", "x", x);
  std::vector<std::uint8_t> blocks(x.size() / kSuper * kQ8KBlockBytes, 0);
  for (std::size_t b = 0; b < x.size() / kSuper; ++b) {
    const float* v = x.data() + b * kSuper;
    std::uint8_t* out = blocks.data() + b * kQ8KBlockBytes;
    // x_* = the value of largest magnitude, the first one on a tie
    float largest = 0.0f, amax = 0.0f;
    for (std::size_t l = 0; l < kSuper; ++l)
      if (std::fabs(v[l]) > amax) amax = std::fabs(v[l]), largest = v[l];
    // d = 0, codes and sums 0 for an all-zero super-block, and for one so small that -127 / x_*
    // would overflow a float (|x_*| < 127 / FLT_MAX, where ggml's code is undefined)
    if (amax == 0.0f || !std::isfinite(-127.0f / largest)) continue;
    // q_l = min(127, round_half_even(x_l * iscale)), iscale = -127 / x_*, d = 1 / iscale
    const float iscale = -127.0f / largest;
    for (std::size_t l = 0; l < kSuper; ++l) {
      const int q = std::min(127, static_cast<int>(std::nearbyint(iscale * v[l])));
      out[4 + l] = static_cast<std::uint8_t>(static_cast<std::int8_t>(q));
    }
    // bsums: sum of the codes of every 16
    for (std::size_t g = 0; g < kSuper / 16; ++g) {
      int sum = 0;
      for (std::size_t l = 0; l < 16; ++l) sum += q8_k_code(out, 16 * g + l);
      write_le(static_cast<std::uint16_t>(static_cast<std::int16_t>(sum)), 2, out + 4 + kSuper + 2 * g);
    }
    write_le(std::bit_cast<std::uint32_t>(1.0f / iscale), 4, out);
  }
  return blocks;
}

Tensor1 quantized_gemv(const QuantizedMatrix& w, const Tensor1& x) {
  validate_quantized_gemv("quantized_gemv", w, x);
  const bool k_quant = w.type == GgmlType::q4_K;
  const std::vector<std::uint8_t> xq = k_quant ? quantize_activations_q8_k(x) : quantize_activations_q8_0(x);
  Tensor1 y = Tensor1::from_shape({w.rows});
  for (std::size_t r = 0; r < w.rows; ++r)
    y(r) = k_quant ? dot_q4_k_blocks(w.row(r), xq, w.cols) : dot_32_weight_blocks(w.type, w.row(r), xq, w.cols);
  return y;
}

}  // namespace tvlab::ref
