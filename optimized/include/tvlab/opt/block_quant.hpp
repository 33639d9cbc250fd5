#pragma once
/// @file
/// ggml's block formats on the CPU (chapter 08): the same bytes as `tvlab::ref::quantize` and the
/// same floats as `tvlab::ref::dequantize`, bit for bit. The reference walks each block element
/// by element; here each block of 32 floats is two AVX-512 registers (four with AVX2), the
/// block's maximum, minimum and codes are computed on whole registers, and OpenMP threads take
/// rows. The arithmetic is the reference's, operation for operation (a multiply, then an add,
/// each rounded; no fused multiply-add in this file), which is what keeps the bytes equal.
///
/// The K-quants (Q4_K, Q6_K): the reference's block code, threads over rows. Their quantizer is
/// a serial search over trial scales per sub-block, which ggml too leaves scalar in its reference.

#include "tvlab/core/ggml_blocks.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// @ingroup ch08
/// Same contract and errors as `ref::quantize`: every row of x [rows, cols] in blocks of
/// block_size(type) (32, or 256 for the K-quants).
QuantizedMatrix quantize(const Tensor2& x, GgmlType type);

/// @ingroup ch08
/// Same contract and errors as `ref::dequantize`.
Tensor2 dequantize(const QuantizedMatrix& q);

}  // namespace tvlab::opt
