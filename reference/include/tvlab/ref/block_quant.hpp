#pragma once
/// @file
/// ggml's block quantization formats Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the K-quants Q2_K to Q6_K
/// (chapter 08), byte for byte as llama.cpp's `quantize_row_*_ref` and `dequantize_row_*` compute
/// them: a block of 32 weights keeps one fp16 scale d (and, for the "_1" types, an fp16 minimum m)
/// and 32 small integer codes q; a K-quant super-block of 256 keeps a scale per sub-block,
/// itself quantized against fp16 super-block scales (layouts in core/ggml_blocks.hpp). Every format
/// is held to ggml's own ggml-quants.c (0.15.3), compiled and run by scripts/ggml_quants_check.sh:
/// the same bytes and values on a million weights and on zero, tiny, large and constant blocks.
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
/// - **Q4_K** (asymmetric, 4 bits, super-block of 256 in 8 sub-blocks of 32):
///   \f$ \hat x_i = d\, s_j\, q_i - d_{min}\, m_j \f$ for element i of sub-block j, with 6-bit codes
///   \f$ s_j, m_j \f$ and fp16 d, dmin. Each sub-block is first fitted on its own,
///   \f$ x_i \approx a_j q_i - b_j \f$, by a search over 21 grids that minimises the weighted squared
///   error \f$ \sum_i w_i (a_j q_i - b_j - x_i)^2 \f$ with \f$ w_i = \mathrm{rms}_j + |x_i| \f$ (ggml's
///   make_qkx2_quants, a least-squares line per grid); then \f$ d = \max_j a_j / 63 \f$,
///   \f$ s_j = \mathrm{round}(63\, a_j / \max_j a_j) \f$ (likewise dmin and m_j), and the codes are
///   rounded again on the grid the stored numbers give: \f$ q_i = \mathrm{round}((x_i + d_{min} m_j) / (d\, s_j)) \in [0, 15] \f$.
/// - **Q5_K** (asymmetric, 5 bits): Q4_K with codes \f$ q_i \in [0, 31] \f$ and 16 trial grids
///   (\f$ r_{min} = -0.5 \f$, 15 steps of 0.1, against Q4_K's -1 and 20).
/// - **Q3_K** (symmetric, 3 bits, 16 sub-blocks of 16): \f$ \hat x_i = d\, (s_j - 32)\, (q_i - 4) \f$ with a 6-bit
///   \f$ s_j \f$. Each sub-block is fitted \f$ x_i \approx a_j l_i \f$, \f$ l_i \in [-4, 3] \f$, weights \f$ x_i^2 \f$,
///   starting on the grid \f$ -4 / x_{max} \f$ and then changing one code at a time to
///   \f$ \mathrm{round}(x_i S'_{ll} / S'_{xl}) \f$ (the best code given the others) while that lowers the error
///   (ggml's make_q3_quants); \f$ d = -a^* / 32 \f$, \f$ s_j - 32 = \mathrm{clamp}(\mathrm{round}(-32\, a_j / a^*), -32, 31) \f$,
///   and \f$ q_i - 4 = \mathrm{round}(x_i / (d\, (s_j - 32))) \in [-4, 3] \f$.
/// - **Q2_K** (asymmetric, 2 bits, 16 sub-blocks of 16): \f$ \hat x_i = d\, s_j\, q_i - d_{min}\, m_j \f$ with
///   4-bit \f$ s_j, m_j \f$. The fit is Q4_K's with codes 0..3, weights \f$ |x_i| \f$ and the trial grids
///   scored by the weighted absolute error \f$ \sum_i w_i |a_j q_i - b_j - x_i| \f$;
///   \f$ d = \max_j a_j / 15 \f$, \f$ s_j = \mathrm{round}(15\, a_j / \max_j a_j) \f$ (likewise dmin, m_j).
/// - **Q6_K** (symmetric, 6 bits, super-block of 256 in 16 sub-blocks of 16):
///   \f$ \hat x_i = d\, s_j\, (q_i - 32) \f$ with int8 \f$ s_j \f$ and fp16 d. Each sub-block is fitted
///   \f$ x_i \approx a_j l_i \f$, \f$ l_i \in [-32, 31] \f$, by a search over 19 grids weighted by
///   \f$ x_i^2 \f$ (ggml's make_qx_quants); with \f$ a^* \f$ the \f$ a_j \f$ of largest magnitude,
///   \f$ d = -a^* / 128 \f$, \f$ s_j = \min(127, \mathrm{round}(-128\, a_j / a^*)) \f$, and
///   \f$ q_i - 32 = \mathrm{round}(x_i / (d\, s_j)) \in [-32, 31] \f$.
///
/// The scale is rounded to fp16 for storage, but the codes of the 32-weight types are computed
/// with the float scale before that rounding, as ggml does; the K-quants compute their final
/// codes from the stored (fp16 and 6- or 8-bit) scales. The dequantized value uses the stored
/// numbers. Rounding: Q8_0 rounds half away from zero (`roundf`), the 4- and 5-bit types add 0.5
/// (after their offset) and truncate, the K-quants round half to even (ggml's nearest_int), all
/// in float, in ggml's order of operations (compiled without fused multiply-adds).

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
/// One super-block of 256 floats into block_bytes(Q4_K) = 144 bytes: fp16 d, fp16 dmin, the 12
/// bytes of 6-bit scale and min codes, the 128 bytes of nibbles (ggml's quantize_row_q4_K_ref).
void quantize_block_q4_k(const float* x, std::uint8_t* block);
/// @ingroup ch08
/// Q4_K's 6-bit scale code `sc` and min code `m` of sub-block j (0..7) from the 12 packed bytes
/// (ggml's `get_scale_min_k4`): for j < 4 the low 6 bits of bytes j and j + 4; for j >= 4 the nibbles
/// of byte j + 4 below the top 2 bits of bytes j - 4 and j.
void q4_k_scale_min(std::size_t j, const std::uint8_t* packed, int& sc, int& m);
/// @ingroup ch08
/// One super-block of 256 floats into block_bytes(Q5_K) = 176 bytes: fp16 d, fp16 dmin, the 12
/// bytes of 6-bit scale and min codes, 32 bytes of fifth bits, 128 bytes of nibbles (ggml's
/// quantize_row_q5_K_ref).
void quantize_block_q5_k(const float* x, std::uint8_t* block);
/// @ingroup ch08
/// One super-block of 256 floats into block_bytes(Q3_K) = 110 bytes: 32 bytes of third bits, 64 of
/// 2-bit pairs, 12 of 6-bit scale codes, fp16 d (ggml's quantize_row_q3_K_ref).
void quantize_block_q3_k(const float* x, std::uint8_t* block);
/// @ingroup ch08
/// One super-block of 256 floats into block_bytes(Q2_K) = 84 bytes: 16 bytes of 4-bit scale and min
/// codes, 64 of 2-bit pairs, fp16 d, fp16 dmin (ggml's quantize_row_q2_K_ref).
void quantize_block_q2_k(const float* x, std::uint8_t* block);
/// @ingroup ch08
/// One super-block of 256 floats into block_bytes(Q6_K) = 210 bytes: 128 bytes of low 4 bits,
/// 64 of high 2 bits, 16 int8 scale codes, fp16 d (ggml's quantize_row_q6_K_ref).
void quantize_block_q6_k(const float* x, std::uint8_t* block);
/// @ingroup ch08
/// One block of `type` (block_size(type) floats in, block_bytes(type) bytes out): the function
/// above for that type. Errors: a type that is not a block type.
void quantize_block(GgmlType type, const float* x, std::uint8_t* block);

/// @ingroup ch08
/// The integer code of element j (0 to 31) of a block of a 32-weight type, offset included: the
/// int8 of Q8_0, \f$ q_j - 8 \f$ (Q4_0), \f$ q_j - 16 \f$ (Q5_0), \f$ q_j \f$ (Q4_1, Q5_1), so that the value
/// is d times the code (plus m for the "_1" types). Errors: a type that is not a 32-weight block type.
int block_code(GgmlType type, const std::uint8_t* block, std::size_t j);

/// @ingroup ch08
/// The block_size(type) values a block of `type` stands for: \f$ \hat x_j = d\,q_j \f$ (Q8_0),
/// \f$ d\,(q_j - 8) \f$ (Q4_0), \f$ d\,q_j + m \f$ (Q4_1), \f$ d\,(q_j - 16) \f$ (Q5_0), \f$ d\,q_j + m \f$
/// (Q5_1), \f$ d\, s_j\, q_i - d_{min}\, m_j \f$ (Q2_K, Q4_K, Q5_K), \f$ d\, (s_j - 32)\, (q_i - 4) \f$ (Q3_K),
/// \f$ d\, s_j\, (q_i - 32) \f$ (Q6_K).
void dequantize_block(GgmlType type, const std::uint8_t* block, float* y);

/// @ingroup ch08
/// Every row of x [rows, cols] in blocks of block_size(type) (32, or 256 for the K-quants), in one
/// of the block types (quantized_types()). Errors: an empty x, cols not a multiple of the block, a
/// value that is not finite or beyond `largest_quantizable(type)`, a type that is not a block type.
QuantizedMatrix quantize(const Tensor2& x, GgmlType type);

/// @ingroup ch08
/// The matrix [rows, cols] the blocks stand for. Errors: a QuantizedMatrix whose type, cols or
/// byte count do not fit together (`validate_quantized`).
Tensor2 dequantize(const QuantizedMatrix& q);

/// @ingroup ch08
/// The largest |x| a block of `type` can hold: its fp16 scale, at most 65504, times the largest code
/// it divides by (127 for Q8_0, 8 for Q4_0, 16 for Q5_0; 65504 itself for the types that store the
/// minimum in fp16, and for the K-quants, whose fp16 super-block scales stay finite below it). ggml
/// would store an infinite scale beyond it; `quantize` refuses.
double largest_quantizable(GgmlType type);

/// The checks `dequantize` starts with (`validate_quantized`, and a block type), public for the
/// same reason as the next.
void validate_dequantize(const char* function, const QuantizedMatrix& q);

/// The checks `quantize` starts with, public so that other implementations reject the same inputs
/// with the same messages.
/// @param scan_values false skips the pass over x for values that are not finite: for an
///        implementation that checks them as it reads them, and calls again with true when it
///        finds one (the error names the first such value in row-major order).
void validate_quantize(const char* function, const Tensor2& x, GgmlType type, bool scan_values = true);

}  // namespace tvlab::ref
