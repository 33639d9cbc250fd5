#pragma once
/// @file
/// Chapter 08, NVFP4 (NVIDIA's 4-bit float format of the Blackwell GPUs): FP4 E2M1 elements like
/// MXFP4's (tvlab/ref/microscaling.hpp), but a block of **16** elements shares a scale stored as
/// **FP8 E4M3**, not a power of two, and the whole tensor one float32 scale g above the blocks':
/// \f[ \hat x_i = e_i \cdot s_b \cdot g, \qquad g = \frac{\max_i |x_i|}{6 \cdot 448}, \qquad
///     s_b = \mathrm{E4M3}\!\left(\frac{\max_{i \in b} |x_i|}{6\,g}\right), \qquad e_i = \mathrm{E2M1}\!\left(\frac{x_i}{s_b\, g}\right), \f]
/// so that the largest block scale is E4M3's largest value, 448, and each block's largest element
/// lands near E2M1's largest, 6. Both roundings are to nearest, ties to even, saturating. Storage:
/// 4 bits per element and 8 per 16 elements, 4.5 bits per element (and 32 bits per tensor). The
/// finer blocks and the 3-bit mantissa of the block scale (against E8M0's none) are what NVFP4
/// gains over MXFP4 for a quarter of a bit more.

#include <cstdint>
#include <vector>

#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch08
/// A tensor in NVFP4: g, one E4M3 code per 16 elements, one E2M1 code (0 to 15) per element.
struct Nvfp4Tensor {
  float global_scale = 0.0f;
  std::vector<std::uint8_t> block_scales;
  std::vector<std::uint8_t> elements;
};

/// @ingroup ch08
/// The encoding above; an all-zero tensor gets g = 0 and zero codes. Errors: an empty x, a length
/// that is not a multiple of 16, a value that is not finite.
Nvfp4Tensor nvfp4_quantize(const Tensor1& x);

/// @ingroup ch08
/// \f$ \hat x_i = e_i\, s_b\, g \f$. Errors: sizes that do not fit, a code that is not E2M1 or E4M3's NaN.
Tensor1 nvfp4_dequantize(const Nvfp4Tensor& q);

/// @ingroup ch08
/// RMSE of the round trip of every row of x.
double nvfp4_round_trip_rmse(const Tensor2& x);

}  // namespace tvlab::ref
