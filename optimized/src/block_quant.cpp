#include "tvlab/opt/block_quant.hpp"

#include <omp.h>
#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "tvlab/core/error.hpp"
#include "tvlab/ref/block_quant.hpp"

// Compiled with -ffp-contract=off (optimized/CMakeLists.txt): x * id + offset must round twice,
// as in the reference, or a code moves by one where the sum falls on a rounding boundary.

namespace tvlab::opt {
namespace {

constexpr std::size_t kBlock = 32;
using Batch = xsimd::batch<float>;
using IntBatch = xsimd::batch<std::int32_t>;
constexpr std::size_t kLanes = Batch::size;
constexpr std::size_t kBatches = kBlock / kLanes;  // 2 with AVX-512, 4 with AVX2
static_assert(kBlock % kLanes == 0, "a block is a whole number of SIMD registers");

// The largest (or smallest) lane of a register: xsimd 8 has no horizontal max.
template <class Pick>
float across_lanes(const Batch& v, Pick pick) {
  alignas(64) float lanes[kLanes];
  v.store_aligned(lanes);
  float out = lanes[0];
  for (std::size_t l = 1; l < kLanes; ++l) out = pick(out, lanes[l]);
  return out;
}

// The block's floats in registers.
struct Block {
  Batch v[kBatches];
  explicit Block(const float* x) {
    for (std::size_t b = 0; b < kBatches; ++b) v[b] = Batch::load_unaligned(x + b * kLanes);
  }
  float max_abs() const {
    Batch m = xsimd::abs(v[0]);
    for (std::size_t b = 1; b < kBatches; ++b) m = xsimd::max(m, xsimd::abs(v[b]));
    return across_lanes(m, [](float a, float b) { return std::max(a, b); });
  }
  float min() const {
    Batch m = v[0];
    for (std::size_t b = 1; b < kBatches; ++b) m = xsimd::min(m, v[b]);
    return across_lanes(m, [](float a, float b) { return std::min(a, b); });
  }
  // 0 when every value is finite, NaN otherwise (x - x is 0 for a finite x)
  bool finite() const {
    Batch zeros = v[0] - v[0];
    for (std::size_t b = 1; b < kBatches; ++b) zeros += v[b] - v[b];
    return xsimd::hadd(zeros) == 0.0f;
  }
  float max() const {
    Batch m = v[0];
    for (std::size_t b = 1; b < kBatches; ++b) m = xsimd::max(m, v[b]);
    return across_lanes(m, [](float a, float b) { return std::max(a, b); });
  }
};

// trunc((x - offset_in) * id + offset_out), at most `top`, into q[32] (the casts of the 4- and
// 5-bit types: every value here is >= 0, where truncation and the reference's integer cast agree).
void truncated_codes(const Block& blk, float offset_in, float id, float offset_out, int top, std::int32_t* q) {
  for (std::size_t b = 0; b < kBatches; ++b) {
    const Batch scaled = (blk.v[b] - Batch(offset_in)) * Batch(id);
    const IntBatch code = xsimd::batch_cast<std::int32_t>(scaled + Batch(offset_out));  // truncates
    xsimd::min(code, IntBatch(top)).store_unaligned(q + b * kLanes);
  }
}

void pack_nibbles(const std::int32_t* q, std::uint8_t* out) {
  for (std::size_t j = 0; j < kBlock / 2; ++j)
    out[j] = static_cast<std::uint8_t>((q[j] & 0x0F) | ((q[j + kBlock / 2] & 0x0F) << 4));
}

void store_fifth_bits(const std::int32_t* q, std::uint8_t* out) {
  std::uint32_t qh = 0;
  for (std::size_t j = 0; j < kBlock; ++j) qh |= static_cast<std::uint32_t>((q[j] >> 4) & 1) << j;
  for (int b = 0; b < 4; ++b) out[b] = static_cast<std::uint8_t>(qh >> (8 * b));
}

// Each takes the block already in registers and, where it needs it, its max |x|: the loop that
// calls them has loaded and checked both.
void quantize_q8_0(const Block& blk, float amax, std::uint8_t* block) {
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  write_fp16(d, block);
  for (std::size_t b = 0; b < kBatches; ++b) {
    // round half away from zero, as roundf: xsimd::round
    alignas(64) std::int32_t q[kLanes];
    xsimd::batch_cast<std::int32_t>(xsimd::round(blk.v[b] * Batch(id))).store_aligned(q);
    for (std::size_t l = 0; l < kLanes; ++l) block[2 + b * kLanes + l] = static_cast<std::uint8_t>(q[l]);
  }
}

// Q4_0 and Q5_0: d = x_max / -2^(bits-1), where x_max is the first element of largest magnitude.
void quantize_symmetric(const Block& blk, float amax, const float* x, int bits, std::uint8_t* block) {
  float x_max = 0.0f;
  for (std::size_t j = 0; j < kBlock && amax > 0.0f; ++j)
    if (std::fabs(x[j]) == amax) {
      x_max = x[j];
      break;
    }
  const float half = static_cast<float>(1 << (bits - 1));
  const float d = x_max / -half;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  alignas(64) std::int32_t q[kBlock];
  truncated_codes(blk, 0.0f, id, half + 0.5f, (1 << bits) - 1, q);
  write_fp16(d, block);
  if (bits == 5) store_fifth_bits(q, block + 2);
  pack_nibbles(q, block + (bits == 5 ? 6 : 2));
}

// Q4_1 and Q5_1: m = min, d = (max - min) / (2^bits - 1).
void quantize_asymmetric(const Block& blk, int bits, std::uint8_t* block) {
  const float min = blk.min(), max = blk.max();
  const int top = (1 << bits) - 1;
  const float d = (max - min) / static_cast<float>(top);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  alignas(64) std::int32_t q[kBlock];
  truncated_codes(blk, min, id, 0.5f, top, q);
  write_fp16(d, block);
  write_fp16(min, block + 2);
  if (bits == 5) store_fifth_bits(q, block + 4);
  pack_nibbles(q, block + (bits == 5 ? 8 : 4));
}

// The 32 codes of a block with nibbles (and fifth bits), minus `offset`, as floats.
void unpack_codes(const std::uint8_t* nibbles, const std::uint8_t* fifth, int offset, float* codes) {
  std::uint32_t qh = 0;
  if (fifth) qh = fifth[0] | fifth[1] << 8 | fifth[2] << 16 | static_cast<std::uint32_t>(fifth[3]) << 24;
#pragma omp simd
  for (std::size_t j = 0; j < kBlock / 2; ++j) {
    const int high_lo = fifth ? static_cast<int>((qh >> j) & 1) << 4 : 0;
    const int high_hi = fifth ? static_cast<int>((qh >> (j + kBlock / 2)) & 1) << 4 : 0;
    codes[j] = static_cast<float>(((nibbles[j] & 0x0F) | high_lo) - offset);
    codes[j + kBlock / 2] = static_cast<float>(((nibbles[j] >> 4) | high_hi) - offset);
  }
}

void dequantize_block(GgmlType type, const std::uint8_t* block, float* y) {
  const float d = read_fp16(block);
  alignas(64) float codes[kBlock];
  float m = 0.0f;
  bool with_min = false;
  switch (type) {
    case GgmlType::q8_0:
#pragma omp simd
      for (std::size_t j = 0; j < kBlock; ++j) codes[j] = static_cast<float>(static_cast<std::int8_t>(block[2 + j]));
      break;
    case GgmlType::q4_0: unpack_codes(block + 2, nullptr, 8, codes); break;
    case GgmlType::q5_0: unpack_codes(block + 6, block + 2, 16, codes); break;
    case GgmlType::q4_1:
      m = read_fp16(block + 2), with_min = true;
      unpack_codes(block + 4, nullptr, 0, codes);
      break;
    case GgmlType::q5_1:
      m = read_fp16(block + 2), with_min = true;
      unpack_codes(block + 8, block + 4, 0, codes);
      break;
    default: break;
  }
  // x^ = d q (+ m): a product, then a sum, each rounded, as in the reference
  for (std::size_t b = 0; b < kBatches; ++b) {
    Batch value = Batch(d) * Batch::load_aligned(codes + b * kLanes);
    if (with_min) value = value + Batch(m);
    value.store_unaligned(y + b * kLanes);
  }
}

}  // namespace

QuantizedMatrix quantize(const Tensor2& x, GgmlType type) {
  // the values are checked block by block as they are read; one that is not finite brings the
  // reference's scan, for its error naming the first one
  ref::validate_quantize("quantize", x, type, /*scan_values=*/false);
  QuantizedMatrix q{type, x.shape()[0], x.shape()[1], {}};
  q.bytes.resize(q.rows * q.row_bytes());
  const auto rows = static_cast<std::ptrdiff_t>(q.rows);
  const std::size_t n = block_size(type);
  bool all_finite = true;  // and within the format's range
  const auto limit = static_cast<float>(ref::largest_quantizable(type));
#pragma omp parallel for schedule(static) reduction(&& : all_finite)
  for (std::ptrdiff_t r = 0; r < rows; ++r) {
    const float* row_in = x.data() + static_cast<std::size_t>(r) * q.cols;
    std::uint8_t* row_out = q.row(static_cast<std::size_t>(r));
    for (std::size_t b = 0; b < q.cols / n; ++b) {
      const float* in = row_in + b * n;
      std::uint8_t* out = row_out + b * block_bytes(type);
      if (n != kBlock) {
        // the K-quants: checked 32 floats at a time, then the reference's block code (its searches
        // over scales are serial per sub-block)
        bool usable = true;
        for (std::size_t k = 0; k < n; k += kBlock) {
          const Block part(in + k);
          usable = usable && part.finite() && part.max_abs() <= limit;
        }
        if (!usable) {
          all_finite = false;
          break;
        }
        ref::quantize_block(type, in, out);
        continue;
      }
      // one load of the block's registers and one max for the check and the codes
      const Block blk(in);
      const float amax = blk.max_abs();
      if (!blk.finite() || amax > limit) {
        all_finite = false;
        break;
      }
      switch (type) {
        case GgmlType::q8_0: quantize_q8_0(blk, amax, out); break;
        case GgmlType::q4_0: quantize_symmetric(blk, amax, in, 4, out); break;
        case GgmlType::q5_0: quantize_symmetric(blk, amax, in, 5, out); break;
        case GgmlType::q4_1: quantize_asymmetric(blk, 4, out); break;
        case GgmlType::q5_1: quantize_asymmetric(blk, 5, out); break;
        default: break;
      }
    }
  }
  if (!all_finite) ref::validate_quantize("quantize", x, type);  // throws, naming the first such value
  return q;
}

Tensor2 dequantize(const QuantizedMatrix& q) {
  ref::validate_dequantize("dequantize", q);
  Tensor2 y = Tensor2::from_shape({q.rows, q.cols});
  const auto rows = static_cast<std::ptrdiff_t>(q.rows);
  const std::size_t n = block_size(q.type);
  const bool k_quant = is_k_quant(q.type);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t r = 0; r < rows; ++r)
    for (std::size_t b = 0; b < q.cols / n; ++b) {
      const std::uint8_t* in = q.row(static_cast<std::size_t>(r)) + b * block_bytes(q.type);
      float* out = y.data() + static_cast<std::size_t>(r) * q.cols + b * n;
      if (k_quant) ref::dequantize_block(q.type, in, out);  // the K-quants: the reference's block code
      else dequantize_block(q.type, in, out);
    }
  return y;
}

}  // namespace tvlab::opt
