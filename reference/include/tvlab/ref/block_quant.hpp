#pragma once
/// @file
/// ggml's block quantization formats Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 (chapter 08), byte for byte
/// as llama.cpp's `quantize_row_*_ref` and `dequantize_row_*` compute them: a block of 32
/// weights keeps one fp16 scale d (and, for the "_1" types, an fp16 minimum m) and 32 small
/// integer codes q.
///
/// - **Q8_0** (symmetric, 8 bits): \f$ d = \max_j |x_j| / 127 \f$, \f$ q_j = \mathrm{round}(x_j / d) \in [-127, 127] \f$,
///   \f$ \hat x_j = d\, q_j \f$.
/// - **Q4_0** (symmetric, 4 bits): the element of largest magnitude, with its sign, is
///   \f$ x_{max} \f$; \f$ d = x_{max} / (-8) \f$, \f$ q_j = \min(15, \lfloor x_j / d + 8.5 \rfloor) \in [0, 15] \f$,
///   \f$ \hat x_j = d\,(q_j - 8) \f$. Dividing by \f$ -8 \f$ sends \f$ x_{max} \f$ to the code 0, the
///   end of the range with one more step (\f$ -8 \f$ against \f$ +7 \f$), so the largest weight is
///   represented exactly.
/// - **Q4_1** (asymmetric, 4 bits): \f$ m = \min_j x_j \f$, \f$ d = (\max_j x_j - m) / 15 \f$,
///   \f$ q_j = \min(15, \lfloor (x_j - m)/d + 0.5 \rfloor) \f$, \f$ \hat x_j = d\, q_j + m \f$: the
///   min–max (affine) formula with \f$ 2^4 - 1 \f$ steps, m playing the zero point's part.
/// - **Q5_0** and **Q5_1**: Q4_0 and Q4_1 with one more bit (\f$ d = x_{max}/(-16) \f$, codes to
///   31, and \f$ d = (\max - \min)/31 \f$), the fifth bits of a block's 32 codes in one 32-bit word.
///
/// The scale is rounded to fp16 for storage, but the codes are computed with the float scale
/// before that rounding, as ggml does; the dequantized value uses the stored fp16 scale.
/// Rounding: Q8_0 rounds half away from zero (`roundf`), the 4- and 5-bit types add 0.5 (after
/// their offset) and truncate.

#include <cstdint>

#include "tvlab/core/ggml_blocks.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch08
/// One block of 32 floats into block_bytes(Q8_0) = 34 bytes: fp16 d (little-endian), then the
/// 32 codes as int8.
void quantize_block_q8_0(const float* x, std::uint8_t* block);
/// @ingroup ch08
/// One block into 18 bytes: fp16 d, then byte j = q_j | q_{j+16} << 4 for j < 16.
void quantize_block_q4_0(const float* x, std::uint8_t* block);
/// @ingroup ch08
/// One block into 20 bytes: fp16 d, fp16 m, then the nibbles as Q4_0's.
void quantize_block_q4_1(const float* x, std::uint8_t* block);
/// @ingroup ch08
/// One block into 22 bytes: fp16 d, the fifth bits (uint32, bit j for element j), the low nibbles.
void quantize_block_q5_0(const float* x, std::uint8_t* block);
/// @ingroup ch08
/// One block into 24 bytes: fp16 d, fp16 m, the fifth bits, the low nibbles.
void quantize_block_q5_1(const float* x, std::uint8_t* block);

/// @ingroup ch08
/// The 32 values a block of `type` stands for: \f$ \hat x_j = d\,q_j \f$ (Q8_0), \f$ d\,(q_j - 8) \f$
/// (Q4_0), \f$ d\,q_j + m \f$ (Q4_1), \f$ d\,(q_j - 16) \f$ (Q5_0), \f$ d\,q_j + m \f$ (Q5_1).
void dequantize_block(GgmlType type, const std::uint8_t* block, float* y);

/// @ingroup ch08
/// Every row of x [rows, cols] in blocks of 32, in one of the block types (quantized_types()).
/// Errors: an empty x, cols not a multiple of 32, a value that is not finite or beyond
/// `largest_quantizable(type)`, a type that is not a block type.
QuantizedMatrix quantize(const Tensor2& x, GgmlType type);

/// @ingroup ch08
/// The matrix [rows, cols] the blocks stand for. Errors: a QuantizedMatrix whose type, cols or
/// byte count do not fit together (`validate_quantized`).
Tensor2 dequantize(const QuantizedMatrix& q);

/// @ingroup ch08
/// The largest |x| a block of `type` can hold: its fp16 scale, at most 65504, times the largest code
/// it divides by (127 for Q8_0, 8 for Q4_0, 16 for Q5_0; 65504 itself for the types that store the
/// minimum in fp16). ggml would store an infinite scale beyond it; `quantize` refuses.
double largest_quantizable(GgmlType type);

/// The checks `quantize` starts with, public so that other implementations reject the same inputs
/// with the same messages.
/// @param scan_values false skips the pass over x for values that are not finite: for an
///        implementation that checks them as it reads them, and calls again with true when it
///        finds one (the error names the first such value in row-major order).
void validate_quantize(const char* function, const Tensor2& x, GgmlType type, bool scan_values = true);

}  // namespace tvlab::ref
