#pragma once
/// @file
/// Device-pointer entry points of chapter 08's CUDA kernels (block_quant.cu); no xtensor here.

#include <cstddef>
#include <cstdint>

namespace tvlab::cuda::device {

/// y `[rows, cols]` from the blocks of a 32-weight type or a K-quant (ggml's type number); all
/// device memory.
void dequantize_blocks(std::uint32_t type, const std::uint8_t* blocks, std::size_t rows, std::size_t cols, float* y);

/// y `[rows]` = W x: W's blocks (Q8_0 = 8 or Q4_0 = 2) with x's Q8_0 blocks, or W's Q4_K = 12
/// super-blocks with x's Q8_K super-blocks; all device memory.
void quantized_gemv(std::uint32_t type, const std::uint8_t* w, std::size_t rows, std::size_t cols,
                    const std::uint8_t* x_blocks, float* y);

/// codes[i] = the FP8 code of x[i]: e4m3 (or e5m2), saturating or not; device memory.
void fp8_encode(const float* x, std::size_t count, bool e4m3, bool saturate, std::uint8_t* codes);

}  // namespace tvlab::cuda::device
