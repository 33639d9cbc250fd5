#pragma once
/// @file
/// The quantized matrix–vector product of a decode step (chapter 08): y = W x with W in ggml's
/// Q8_0 or Q4_0 blocks and x quantized to Q8_0 blocks on the fly, as llama.cpp computes it on the
/// CPU (`ggml_vec_dot_q8_0_q8_0` and `ggml_vec_dot_q4_0_q8_0`, their generic forms).
///
/// Inside a block of 32 the product is an integer dot of the codes,
/// \f$ \mathrm{sumi}_b = \sum_{j} w_j\, x_j \f$ (\f$ w_j = q_j - 8 \f$ for Q4_0, the int8 code for Q8_0; \f$ x_j \f$
/// the activation's int8 code), exact in 32-bit integers (\f$ |\mathrm{sumi}| \le 32 \cdot 128 \cdot 127 \f$).
/// The scales enter once per block, in float, and the blocks of a row are summed in order:
/// \f$ y_r \leftarrow y_r + \mathrm{sumi}_b\,(d_{w,b}\, d_{x,b}) \f$ for Q8_0 and
/// \f$ y_r \leftarrow y_r + (\mathrm{sumi}_b\, d_{w,b})\, d_{x,b} \f$ for Q4_0 (ggml's two expressions, kept
/// so that the results are ggml's to the last bit). Every float operation is written out, so the
/// optimized version can give the same bits: the contract is bit-exact, not approximate.
///
/// Two ways to check it: against the double-precision dot of the *dequantized* operands (the
/// same numbers: only float's roundings of the per-block terms and their sum differ, a tight
/// bound that isolates a kernel's mistakes) and against the dot of the original floats (the
/// quantization error of both operands, loose).

#include <cstdint>
#include <vector>

#include "tvlab/core/ggml_blocks.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch08
/// x `[cols]` in Q8_0 blocks (`quantize_block_q8_0`, ggml's `quantize_row_q8_0_ref`): the
/// activation side of the product, cols / 32 blocks of 34 bytes.
std::vector<std::uint8_t> quantize_activations_q8_0(const Tensor1& x);

/// @ingroup ch08
/// y `[rows]` = W x for W `[rows, cols]` in Q8_0 or Q4_0 and x `[cols]` quantized to Q8_0, in
/// the order above. Errors: a W of another type or whose bytes do not fit its shape, x of another
/// length, a value of x that is not finite.
Tensor1 quantized_gemv(const QuantizedMatrix& w, const Tensor1& x);

/// The checks `quantized_gemv` starts with, public so that other implementations reject the same
/// inputs with the same messages.
void validate_quantized_gemv(const char* function, const QuantizedMatrix& w, const Tensor1& x);

}  // namespace tvlab::ref
