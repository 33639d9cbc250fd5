// CUDA kernels of chapter 08: dequantizing ggml's 32-weight block formats, the quantized
// matrix-vector product, FP8 conversion by the hardware's intrinsics. Every float operation that
// decides a value is a round-to-nearest intrinsic (__fmul_rn, __fadd_rn): nvcc contracts a * b + c
// into one FMA otherwise, which rounds once where the reference rounds twice.

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "check.cuh"
#include "tvlab/cuda/block_quant_device.hpp"

namespace tvlab::cuda::device {
namespace {

constexpr int kBlock = 32;
constexpr std::uint32_t kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8;

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
  dequantize_kernel<<<blocks_for(count, 256), 256>>>(type, blocks, count, y);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

void quantized_gemv(std::uint32_t type, const std::uint8_t* w, std::size_t rows, std::size_t cols,
                    const std::uint8_t* x_blocks, float* y) {
  if (rows == 0) return;
  constexpr int kWarps = 4;  // rows per thread block
  gemv_kernel<<<static_cast<unsigned>((rows + kWarps - 1) / kWarps), kWarps * 32>>>(
      type, w, static_cast<int>(rows), static_cast<int>(cols / kBlock), x_blocks, y);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

void fp8_encode(const float* x, std::size_t count, bool e4m3, bool saturate, std::uint8_t* codes) {
  if (count == 0) return;
  fp8_kernel<<<blocks_for(static_cast<long long>(count), 256), 256>>>(x, static_cast<long long>(count), e4m3, saturate, codes);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tvlab::cuda::device
