#pragma once
/// @file
/// Chapter 08 on the GPU, host tensors in and out: dequantizing ggml's block formats, the quantized
/// matrix–vector product, and FP8 conversion by the CUDA intrinsics. The same results as
/// `tvlab::ref`, bit for bit: every product and sum that decides a value is written with the
/// round-to-nearest intrinsics (`__fmul_rn`, `__fadd_rn`), which nvcc never fuses into an FMA.

#include <cstdint>
#include <vector>

#include "tvlab/core/ggml_blocks.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/fp8.hpp"

namespace tvlab::cuda {

/// @ingroup ch08
/// `ref::dequantize` for every block format (the 32-weight ones and the K-quants Q2_K to Q6_K): one
/// thread per weight, which reads its block's scales (a K-quant's sub-block scale and min from the
/// packed codes) and its own code.
Tensor2 dequantize(const QuantizedMatrix& q);

/// @ingroup ch08
/// `ref::quantized_gemv` (Q8_0 or Q4_0 weights with x quantized to Q8_0 on the host as the
/// reference does, or Q4_K with x in Q8_K): one warp per row, each lane the integer dot of one block
/// (a Q4_K super-block's S and M), the 32 lanes' float terms then added in block order by lane 0,
/// the reference's order.
Tensor1 quantized_gemv(const QuantizedMatrix& w, const Tensor1& x);

/// @ingroup ch08
/// `ref::fp8_encode` of every value of x by `__nv_cvt_float_to_fp8` (saturating: `__NV_SATFINITE`,
/// or `__NV_NOSAT`), for checking the reference against the hardware's conversion.
std::vector<std::uint8_t> fp8_encode(const Tensor1& x, ref::Fp8Format format, ref::Overflow overflow);

}  // namespace tvlab::cuda
