#pragma once
/// @file
/// The quantized matrix–vector product of a decode step (chapter 08): y = W x with W in ggml's
/// Q8_0 or Q4_0 blocks and x quantized to Q8_0 blocks on the fly, or W in Q4_K super-blocks and x
/// in Q8_K super-blocks, as llama.cpp computes it on the CPU (`ggml_vec_dot_q8_0_q8_0`,
/// `ggml_vec_dot_q4_0_q8_0` and `ggml_vec_dot_q4_K_q8_K`, their generic forms).
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
/// Q4_K (super-blocks of 256: eight sub-blocks j of 32 with 6-bit codes \f$ s_j, m_j \f$, fp16 d and
/// dmin, 4-bit q) stands for \f$ \hat w = d\, s_j\, q - d_{\min} m_j \f$. Against Q8_K activations (one
/// float \f$ d_x \f$ per 256, int8 codes, and the code sums of each 16, `bsums`) a super-block's product is
/// two integer sums and two float terms:
/// \f[ S = \sum_j s_j \sum_{l \in j} q_l x_l, \qquad M = \sum_j m_j \sum_{l \in j} x_l, \qquad y_r \leftarrow \big(y_r + (d\,d_x)\,S\big) - (d_{\min} d_x)\,M. \f]
/// S and M are exact (\f$ |S| \le 8 \cdot 63 \cdot 32 \cdot 15 \cdot 127 < 2^{31} \f$); S is rounded once when
/// it becomes a float (it can pass \f$ 2^{24} \f$). ggml's generic code adds the same terms in eight
/// partial sums and its SIMD versions in other orders: for Q4_K the order above is this project's,
/// the same in every backend, and the bits are compared between backends, not with ggml.
///
/// Two ways to check it: against the double-precision dot of the *dequantized* operands (the
/// same numbers: only float's roundings of the per-block terms and their sum differ, a tight
/// bound that isolates a kernel's mistakes) and against the dot of the original floats (the
/// quantization error of both operands, loose).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tvlab/core/ggml_blocks.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch08
/// x `[cols]` in Q8_0 blocks (`quantize_block_q8_0`, ggml's `quantize_row_q8_0_ref`): the
/// activation side of the product, cols / 32 blocks of 34 bytes.
std::vector<std::uint8_t> quantize_activations_q8_0(const Tensor1& x);

/// Bytes of one Q8_K super-block (ggml's `block_q8_K`): float32 d, 256 int8 codes, 16 int16 sums.
inline constexpr std::size_t kQ8KBlockBytes = 4 + 256 + 16 * 2;

/// @ingroup ch08
/// x `[cols]` in Q8_K super-blocks (ggml's `quantize_row_q8_K_ref`): per 256 values, with \f$ x_* \f$ the
/// value of largest magnitude (its sign kept), \f$ d = x_* / (-127) \f$ stored as a float,
/// \f$ q_l = \min(127, \mathrm{round}(x_l \cdot (-127 / x_*))) \f$ rounded half to even, and the sum of the codes
/// of every 16 (`bsums`, int16), all little-endian. (d is negative when \f$ x_* > 0 \f$: the codes carry
/// the opposite sign, and d q restores it.) An all-zero super-block gets d = 0, zero codes and sums.
std::vector<std::uint8_t> quantize_activations_q8_k(const Tensor1& x);

/// @ingroup ch08
/// y `[rows]` = W x for W `[rows, cols]` in Q8_0 or Q4_0 with x `[cols]` quantized to Q8_0, or W in
/// Q4_K with x quantized to Q8_K, in the order above. Errors: a W of another type or whose bytes do
/// not fit its shape, x of another length, a value of x that is not finite.
Tensor1 quantized_gemv(const QuantizedMatrix& w, const Tensor1& x);

/// The checks `quantized_gemv` starts with, public so that other implementations reject the same
/// inputs with the same messages.
void validate_quantized_gemv(const char* function, const QuantizedMatrix& w, const Tensor1& x);

}  // namespace tvlab::ref
