// CUDA kernels of chapter 08: dequantizing ggml's block formats (the 32-weight ones and the
// K-quants Q2_K to Q6_K), the quantized matrix-vector product (Q8_0, Q4_0; Q4_K), FP8 conversion by the hardware's intrinsics. Every float operation that
// decides a value is a round-to-nearest intrinsic (__fmul_rn, __fadd_rn): nvcc contracts a * b + c
// into one FMA otherwise, which rounds once where the reference rounds twice.

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "check.cuh"
#include "tvlab/cuda/block_quant_device.hpp"

namespace tvlab::cuda::device {
namespace {

constexpr int kBlock = 32;
constexpr int kSuper = 256;  // the K-quants' super-block
constexpr std::uint32_t kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8;
constexpr std::uint32_t kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14;
constexpr int kQ2KBytes = 84, kQ3KBytes = 110, kQ4KBytes = 144, kQ5KBytes = 176, kQ6KBytes = 210, kQ8KBytes = 292;

__host__ __device__ constexpr int block_bytes(std::uint32_t type) {
  return type == kQ8_0 ? 34 : type == kQ4_0 ? 18 : type == kQ4_1 ? 20 : type == kQ5_0 ? 22 : 24;
}

__device__ float load_fp16(const std::uint8_t* p) {
  const unsigned short bits = static_cast<unsigned short>(p[0] | (p[1] << 8));
  return __half2float(__ushort_as_half(bits));
}

// The integer code of element j of a block (Q4_0 and Q5_0 minus their offsets 8 and 16), and
// whether the block has a minimum m (the "_1" types).
__device__ int block_code(std::uint32_t type, const std::uint8_t* b, int j) {
  if (type == kQ8_0) return static_cast<std::int8_t>(b[2 + j]);
  const int nibbles_at = type == kQ4_0 ? 2 : type == kQ4_1 ? 4 : type == kQ5_0 ? 6 : 8;
  const std::uint8_t byte = b[nibbles_at + (j % 16)];
  int q = j < 16 ? (byte & 0x0F) : (byte >> 4);
  if (type == kQ5_0 || type == kQ5_1) {
    const int fifth_at = type == kQ5_0 ? 2 : 4;
    const unsigned qh = b[fifth_at] | (b[fifth_at + 1] << 8) | (b[fifth_at + 2] << 16) | (static_cast<unsigned>(b[fifth_at + 3]) << 24);
    q |= static_cast<int>((qh >> j) & 1u) << 4;
  }
  return type == kQ4_0 ? q - 8 : type == kQ5_0 ? q - 16 : q;
}

// Q4_K's 6-bit scale and min codes of sub-block j (ref::q4_k_scale_min).
__device__ void q4_k_scale_min(int j, const std::uint8_t* packed, int& sc, int& m) {
  if (j < 4) {
    sc = packed[j] & 63;
    m = packed[j + 4] & 63;
  } else {
    sc = (packed[j + 4] & 0x0F) | ((packed[j - 4] >> 6) << 4);
    m = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

// Q4_K's nibble of element l (0..255) of a super-block: run l / 64, low halves for the first 32.
__device__ int q4_k_nibble(const std::uint8_t* block, int l) {
  const std::uint8_t byte = block[16 + 32 * (l / 64) + l % 32];
  return (l / 32) % 2 == 0 ? (byte & 0x0F) : (byte >> 4);
}

// The 2 low bits of element l of Q2_K's and Q3_K's pairs (ref's pair_of): in half h = l / 128, byte
// 32h + l % 32 holds elements l, l + 32, l + 64, l + 96 of the half in its bit pairs.
__device__ int pair_of(const std::uint8_t* qs, int l) {
  return (qs[32 * (l / 128) + l % 32] >> (2 * ((l % 128) / 32))) & 3;
}

// One thread per weight of a K-quant, as ref::dequantize_block, each product and the difference
// rounded on its own: Q4_K and Q5_K x^ = (d s_j) q - dmin m_j (Q5_K: q has a fifth bit), Q3_K
// x^ = (d (s_j - 32)) (q - 4), Q2_K x^ = (d s_j) q - dmin m_j, Q6_K x^ = (d s_j) (q - 32).
__global__ void dequantize_k_kernel(std::uint32_t type, const std::uint8_t* blocks, long long count, float* y) {
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  const int l = static_cast<int>(i % kSuper);
  const long long super = i / kSuper;
  if (type == kQ4_K || type == kQ5_K) {
    const std::uint8_t* b = blocks + super * (type == kQ4_K ? kQ4KBytes : kQ5KBytes);
    int sc = 0, m = 0;
    q4_k_scale_min(l / 32, b + 4, sc, m);
    int q = 0;
    if (type == kQ4_K) {
      q = q4_k_nibble(b, l);
    } else {  // the nibbles start at byte 48, after 32 bytes of fifth bits (bit j of byte l % 32)
      const std::uint8_t byte = b[48 + 32 * (l / 64) + l % 32];
      q = ((l / 32) % 2 == 0 ? (byte & 0x0F) : (byte >> 4)) + (((b[16 + l % 32] >> (l / 32)) & 1) << 4);
    }
    const float step = __fmul_rn(load_fp16(b), static_cast<float>(sc)), offset = __fmul_rn(load_fp16(b + 2), static_cast<float>(m));
    y[i] = __fsub_rn(__fmul_rn(step, static_cast<float>(q)), offset);
    return;
  }
  if (type == kQ3_K) {  // 32 bytes of third bits, 64 of pairs, 12 of 6-bit scales, fp16 d
    const std::uint8_t* b = blocks + super * kQ3KBytes;
    const int j = l / 16;
    const std::uint8_t* packed = b + 96;
    const int low = j < 8 ? packed[j] & 0x0F : packed[j - 8] >> 4;
    const int scale = low | (((packed[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
    const int third = (b[l % 32] >> (l / 32)) & 1;
    const float step = __fmul_rn(load_fp16(b + 108), static_cast<float>(scale - 32));
    y[i] = __fmul_rn(step, static_cast<float>(pair_of(b + 32, l) + 4 * third - 4));
    return;
  }
  if (type == kQ2_K) {  // 16 bytes of 4-bit scale and min codes, 64 of pairs, fp16 d, fp16 dmin
    const std::uint8_t* b = blocks + super * kQ2KBytes;
    const std::uint8_t sm = b[l / 16];
    const float step = __fmul_rn(load_fp16(b + 80), static_cast<float>(sm & 0x0F));
    const float offset = __fmul_rn(load_fp16(b + 82), static_cast<float>(sm >> 4));
    y[i] = __fsub_rn(__fmul_rn(step, static_cast<float>(pair_of(b + 16, l))), offset);
    return;
  }
  // Q6_K: half h = l / 128 holds 64 bytes of low nibbles and 32 of high bit pairs; within it,
  // element e = r + 32 k (r < 32, k = 0..3) has its low 4 bits in byte r + 32 (k % 2) (low
  // nibble for k < 2) and its high 2 bits at bit 2k of byte r
  const std::uint8_t* b = blocks + (i / kSuper) * kQ6KBytes;
  const int h = l / 128, e = l % 128, r = e % 32, k = e / 32;
  const std::uint8_t low_byte = b[64 * h + r + 32 * (k % 2)];
  const int low = k < 2 ? (low_byte & 0x0F) : (low_byte >> 4);
  const int high = (b[128 + 32 * h + r] >> (2 * k)) & 3;
  const int scale = static_cast<std::int8_t>(b[192 + 8 * h + e / 16]);
  y[i] = __fmul_rn(__fmul_rn(load_fp16(b + 208), static_cast<float>(scale)), static_cast<float>((low | high << 4) - 32));
}

// One thread per weight: x^ = d q, or d q + m (a product, then a sum, each rounded).
__global__ void dequantize_kernel(std::uint32_t type, const std::uint8_t* blocks, long long count, float* y) {
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  const std::uint8_t* b = blocks + (i / kBlock) * block_bytes(type);
  const int j = static_cast<int>(i % kBlock);
  const float value = __fmul_rn(load_fp16(b), static_cast<float>(block_code(type, b, j)));
  const bool with_min = type == kQ4_1 || type == kQ5_1;
  y[i] = with_min ? __fadd_rn(value, load_fp16(b + 2)) : value;
}

// One warp per row. Lane l takes block c + l of each chunk of 32 blocks: the integer dot of its
// codes with x's, then its float term with the reference's roundings; lane 0 adds the chunk's
// terms in block order (shuffled to it one by one), so the row's sum is the reference's.
__global__ void gemv_kernel(std::uint32_t type, const std::uint8_t* w, int rows, int blocks,
                            const std::uint8_t* x_blocks, float* y) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int w_bytes = block_bytes(type);
  const std::uint8_t* w_row = w + static_cast<long long>(row) * blocks * w_bytes;
  float sum = 0.0f;
  for (int c = 0; c < blocks; c += 32) {
    float term = 0.0f;
    const int b = c + lane;
    if (b < blocks) {
      const std::uint8_t* wb = w_row + static_cast<long long>(b) * w_bytes;
      const std::uint8_t* xb = x_blocks + static_cast<long long>(b) * 34;
      int sumi = 0;
      for (int j = 0; j < kBlock; ++j) sumi += block_code(type, wb, j) * static_cast<std::int8_t>(xb[2 + j]);
      const float d_w = load_fp16(wb), d_x = load_fp16(xb), s = static_cast<float>(sumi);
      term = type == kQ8_0 ? __fmul_rn(s, __fmul_rn(d_w, d_x)) : __fmul_rn(__fmul_rn(s, d_w), d_x);
    }
    const int in_chunk = min(32, blocks - c);
    for (int k = 0; k < in_chunk; ++k) {
      const float t = __shfl_sync(0xffffffffu, term, k);
      if (lane == 0) sum = __fadd_rn(sum, t);
    }
  }
  if (lane == 0) y[row] = sum;
}

// Q4_K against Q8_K, one warp per row. Lane l takes super-block c + l of each chunk of 32: the exact
// integer sums S = sum_j s_j dot_j and M = sum_j m_j (sum of x's codes in sub-block j), then the two
// float terms (d d_x) S and (dmin d_x) M; lane 0 adds them in super-block order, y = (y + plus) -
// minus, as ref::quantized_gemv does.
__global__ void gemv_q4_k_kernel(const std::uint8_t* w, int rows, int supers, const std::uint8_t* x_blocks, float* y) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const std::uint8_t* w_row = w + static_cast<long long>(row) * supers * kQ4KBytes;
  float sum = 0.0f;
  for (int c = 0; c < supers; c += 32) {
    float plus = 0.0f, minus = 0.0f;
    const int b = c + lane;
    if (b < supers) {
      const std::uint8_t* wb = w_row + static_cast<long long>(b) * kQ4KBytes;
      const std::uint8_t* xb = x_blocks + static_cast<long long>(b) * kQ8KBytes;
      int scaled = 0, offsets = 0;
      for (int j = 0; j < kSuper / kBlock; ++j) {
        int sc = 0, m = 0;
        q4_k_scale_min(j, wb + 4, sc, m);
        int dot = 0, x_sum = 0;
        for (int l = kBlock * j; l < kBlock * (j + 1); ++l) {
          const int x = static_cast<std::int8_t>(xb[4 + l]);
          dot += q4_k_nibble(wb, l) * x;
          x_sum += x;
        }
        scaled += sc * dot;
        offsets += m * x_sum;
      }
      const unsigned d_x_bits = xb[0] | (xb[1] << 8) | (xb[2] << 16) | (static_cast<unsigned>(xb[3]) << 24);
      const float d_x = __uint_as_float(d_x_bits);
      plus = __fmul_rn(__fmul_rn(load_fp16(wb), d_x), __int2float_rn(scaled));
      minus = __fmul_rn(__fmul_rn(load_fp16(wb + 2), d_x), __int2float_rn(offsets));
    }
    const int in_chunk = min(32, supers - c);
    for (int k = 0; k < in_chunk; ++k) {
      const float p = __shfl_sync(0xffffffffu, plus, k), m = __shfl_sync(0xffffffffu, minus, k);
      if (lane == 0) sum = __fsub_rn(__fadd_rn(sum, p), m);
    }
  }
  if (lane == 0) y[row] = sum;
}

__global__ void fp8_kernel(const float* x, long long count, bool e4m3, bool saturate, std::uint8_t* codes) {
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  codes[i] = __nv_cvt_float_to_fp8(x[i], saturate ? __NV_SATFINITE : __NV_NOSAT, e4m3 ? __NV_E4M3 : __NV_E5M2);
}

unsigned blocks_for(long long count, int threads) { return static_cast<unsigned>((count + threads - 1) / threads); }

}  // namespace

void dequantize_blocks(std::uint32_t type, const std::uint8_t* blocks, std::size_t rows, std::size_t cols, float* y) {
  const long long count = static_cast<long long>(rows * cols);
  if (count == 0) return;
  if (type >= kQ2_K && type <= kQ6_K)
    dequantize_k_kernel<<<blocks_for(count, 256), 256>>>(type, blocks, count, y);
  else
    dequantize_kernel<<<blocks_for(count, 256), 256>>>(type, blocks, count, y);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

void quantized_gemv(std::uint32_t type, const std::uint8_t* w, std::size_t rows, std::size_t cols,
                    const std::uint8_t* x_blocks, float* y) {
  if (rows == 0) return;
  constexpr int kWarps = 4;  // rows per thread block
  const unsigned grid = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  if (type == kQ4_K) {
    gemv_q4_k_kernel<<<grid, kWarps * 32>>>(w, static_cast<int>(rows), static_cast<int>(cols / kSuper), x_blocks, y);
    TVLAB_CUDA_CHECK(cudaGetLastError());
    return;
  }
  gemv_kernel<<<grid, kWarps * 32>>>(
      type, w, static_cast<int>(rows), static_cast<int>(cols / kBlock), x_blocks, y);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

void fp8_encode(const float* x, std::size_t count, bool e4m3, bool saturate, std::uint8_t* codes) {
  if (count == 0) return;
  fp8_kernel<<<blocks_for(static_cast<long long>(count), 256), 256>>>(x, static_cast<long long>(count), e4m3, saturate, codes);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tvlab::cuda::device
