#pragma once
/// @file
/// Chapter 08, the microscaling (MX) block formats of the OCP Microscaling Formats (MX)
/// Specification, version 1.0 (2023; Rouhani et al., "Microscaling Data Formats for Deep Learning",
/// arXiv:2310.10537): a block of k = 32 elements shares one scale X, an 8-bit power of two, and each
/// element is a small floating-point number \f$ P_i \f$; the block stands for \f$ X P_i \f$.
///
/// - **The scale** is E8M0: 8 exponent bits, no sign, no mantissa; the code e stands for
///   \f$ 2^{e - 127} \f$ (from \f$ 2^{-127} \f$ to \f$ 2^{127} \f$), and e = 0xFF is NaN (no zero, no infinity).
/// - **The elements**: FP8 E4M3 or E5M2 (tvlab/ref/fp8.hpp) for MXFP8, FP4 E2M1 for MXFP4. E2M1 has
///   2 exponent bits (bias 1) and 1 mantissa bit: the eight magnitudes 0, 0.5 (the subnormal),
///   1, 1.5, 2, 3, 4, 6, and no infinity or NaN.
///
/// The conversion of a block \f$ V_1 \ldots V_k \f$ (MX v1.0, section 6.3, "Algorithm 1"):
/// \f[ \text{shared\_exp} = \lfloor \log_2 \max_i |V_i| \rfloor - e_{max,elem}, \qquad X = 2^{\text{shared\_exp}}, \qquad
///     P_i = \text{quantize\_to\_element\_format}(V_i / X), \f]
/// where \f$ e_{max,elem} \f$ is the exponent of the element format's largest normal number (E4M3: 8,
/// since 448 = 1.75 x 2^8; E5M2: 15; E2M1: 2, since 6 = 1.5 x 2^2), and the quantization rounds to
/// nearest even and clamps normal numbers beyond the range to the largest magnitude, with the sign
/// (`Overflow::saturate`). The offset \f$ e_{max,elem} \f$ puts the block's largest magnitude in the top
/// binade of the element format, \f$ [2^{e_{max}}, 2^{e_{max}+1}) \f$, which uses the whole exponent range;
/// that binade reaches beyond the largest value (448 of [256, 512), 6 of [4, 8)), so the largest
/// element itself may be clamped, by up to 12.5% (E4M3, E5M2) or 25% (E2M1).
///
/// The specification leaves two cases to the implementation; here: shared_exp is clamped to E8M0's
/// range [-127, 127] (only the lower end can be reached from float input: \f$ \lfloor \log_2 \max_i |V_i| \rfloor \f$
/// is at most 127), and an all-zero block, where \f$ \log_2 0 = -\infty \f$, gets the clamped
/// \f$ X = 2^{-127} \f$ (code 0x00) and zero elements. NaN and infinity in the input are rejected (a
/// tvlab::Error naming x and the index): the specification's NaN scale would turn a whole block into NaN.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch08
/// The MX formats: the element format under one E8M0 scale per 32 elements.
enum class MxBlockFormat {
  mxfp8_e4m3,  ///< FP8 E4M3 elements, 8.25 bits per element
  mxfp8_e5m2,  ///< FP8 E5M2 elements, 8.25 bits per element
  mxfp4,       ///< FP4 E2M1 elements, 4.25 bits per element
};

/// @ingroup ch08
/// The number of elements that share a scale (MX v1.0: k = 32 for every concrete MX format).
inline constexpr std::size_t kMxBlockSize = 32;

/// @ingroup ch08
/// A row in an MX format: `scales[b]` is the E8M0 code of block b (elements 32 b to 32 b + 31),
/// `elements[i]` the code of element i: the FP8 byte, or for MXFP4 the 4-bit E2M1 code in the low
/// nibble (one code per byte, high nibble 0: unpacked, so that element i is byte i; a packed store
/// would take half the bytes, as `bits_per_element` counts).
struct MxRow {
  MxBlockFormat format = MxBlockFormat::mxfp8_e4m3;
  std::vector<std::uint8_t> scales;    ///< one E8M0 code per block of 32
  std::vector<std::uint8_t> elements;  ///< one element code per element
};

/// @ingroup ch08
/// "MXFP8 E4M3", "MXFP8 E5M2" or "MXFP4".
const char* mx_name(MxBlockFormat format);

/// @ingroup ch08
/// \f$ e_{max,elem} \f$: 8 (E4M3), 15 (E5M2), 2 (E2M1).
int mx_emax_elem(MxBlockFormat format);

/// @ingroup ch08
/// The element format's largest magnitude: 448, 57344, 6.
float mx_element_max(MxBlockFormat format);

/// @ingroup ch08
/// Storage per element, the shared scale included: element bits + 8 / 32.
double mx_bits_per_element(MxBlockFormat format);

/// @ingroup ch08
/// The value of an E8M0 code: \f$ 2^{e - 127} \f$, NaN for 0xFF.
float e8m0_decode(std::uint8_t code);

/// @ingroup ch08
/// The E2M1 code of x (sign in bit 3, exponent in bits 2..1, mantissa in bit 0): round to nearest,
/// ties to the even code, beyond 6 (and \f$ \pm \f$ inf) saturating to \f$ \pm 6 \f$. Error: x is NaN (E2M1 has none).
std::uint8_t e2m1_encode(float x);

/// @ingroup ch08
/// The value of an E2M1 code (its low 4 bits): \f$ (-1)^s 2^{E-1} (1 + m/2) \f$ for E > 0, \f$ (-1)^s\, m/2 \f$ for E = 0.
/// Error: a code above 0x0F.
float e2m1_decode(std::uint8_t code);

/// @ingroup ch08
/// The value of one element code of the format (FP8 NaN codes give NaN).
float mx_element_decode(std::uint8_t code, MxBlockFormat format);

/// @ingroup ch08
/// The E8M0 code of the shared scale of one block of 32 finite floats: \f$ 127 + \f$ shared_exp, with
/// shared_exp as above, clamped to [-127, 127] (0x00 for an all-zero block).
std::uint8_t mx_shared_scale(const float* block, MxBlockFormat format);

/// @ingroup ch08
/// A row x `[n]`, n a multiple of 32, in the format: the algorithm above, block by block.
/// Errors: an empty x, n not a multiple of 32, a NaN or infinite element (named with its index), a
/// format that is not one of the three.
MxRow mx_quantize(const Tensor1& x, MxBlockFormat format);

/// @ingroup ch08
/// The row `[n]` an MxRow stands for: \f$ \hat x_i = X_{\lfloor i/32 \rfloor} P_i \f$ (NaN where the scale is
/// NaN or the element a NaN code). Errors: no elements, a number of elements that is not 32 times
/// the number of scales, an FP4 code above 0x0F.
Tensor1 mx_dequantize(const MxRow& q);

/// @ingroup ch08
/// The root mean square error of every row of x `[rows, cols]` through the format and back:
/// \f$ \sqrt{\frac{1}{rows \cdot cols} \sum_{r,c} (x_{rc} - \hat x_{rc})^2} \f$ (accumulated in double).
/// Errors: those of `mx_quantize`, for x's rows.
double mx_round_trip_rmse(const Tensor2& x, MxBlockFormat format);

}  // namespace tvlab::ref
