#pragma once
/// @file
/// Chapter 08, affine (uniform) quantization of a matrix to b-bit integers, \f$ 2 \le b \le 8 \f$: the
/// mapping every integer format starts from, before any byte layout.
///
/// The documents' min–max formula (000 L247–L251), with \f$ [x_{min}, x_{max}] \f$ the range and
/// \f$ [0, 2^b - 1] \f$ the codes:
/// \f[ x_q = \mathrm{round}\!\left(\frac{x - x_{min}}{x_{max} - x_{min}} (2^b - 1)\right), \qquad
///     x_{deq} = x_{min} + \frac{x_q}{2^b - 1} (x_{max} - x_{min}). \f]
/// The scale/zero-point form that TensorFlow Lite, PyTorch and ONNX store (Jacob et al. 2018,
/// "Quantization and Training of Neural Networks for Efficient Integer-Arithmetic-Only Inference",
/// eq. 1), with the range widened to contain 0 (\f$ lo = \min(x_{min}, 0) \f$, \f$ hi = \max(x_{max}, 0) \f$):
/// \f[ s = \frac{hi - lo}{2^b - 1}, \quad z = \mathrm{round}(-lo / s), \quad
///     q = \mathrm{clamp}(\mathrm{round}(x / s) + z,\; 0,\; 2^b - 1), \quad \hat x = s\,(q - z). \f]
/// The two give the same codes exactly when \f$ -lo/s \f$ is an integer: then
/// \f$ \mathrm{round}(x/s - lo/s) = \mathrm{round}(x/s) + z \f$. Otherwise they differ in where the
/// rounding of the offset happens. The documents' form keeps the real offset \f$ -lo/s \f$ and rounds
/// once: \f$ lo \f$ and \f$ hi \f$ are codes, every x in the range is within \f$ s/2 \f$ of its value, but 0
/// is in general not representable (a zero weight, or the padding of a convolution, comes back as a
/// small nonzero number). The scale/zero-point form rounds the offset to the integer z first, which
/// moves the grid by \f$ z + lo/s \f$ steps (at most half a step) so that \f$ x = 0 \f$ is the code z exactly;
/// codes then differ from the documents' by at most 1. Moving \f$ lo \f$ to \f$ -z s \f$ and \f$ hi \f$ to
/// \f$ (2^b - 1 - z) s \f$ ("nudging", TensorFlow's `FakeQuantWithMinMaxVars`) makes the two forms agree
/// (`nudge_range`). Since the grid moved by at most half a step, an x inside \f$ [lo, hi] \f$ beyond the
/// grid's end is still within \f$ s/2 \f$ of the end code: with nearest rounding every x in the range
/// satisfies \f$ |x - \hat x| \le s/2 \f$ in both forms.
///
/// Symmetric quantization (000 L253: \f$ x_{max} = -x_{min} = \max|x| \f$) has no zero point:
/// \f[ Q = 2^{b-1} - 1, \quad s = \frac{\max|x|}{Q}, \quad q = \mathrm{clamp}(\mathrm{round}(x/s), -Q, Q), \quad \hat x = s\,q, \f]
/// codes in \f$ [-Q, Q] \f$ (127 for INT8, 7 for INT4; the code \f$ -2^{b-1} \f$ is left unused so the
/// grid is symmetric, as in PyTorch's `qint8` with `quant_min = -127` and ggml's Q8_0).
///
/// Granularity: one (s, z) per tensor, per channel (a row of the matrix: an output channel of a
/// weight `[out_features, in_features]`), or per group of G consecutive elements of a row (G divides
/// the row; GPTQ's and AWQ's "group size 128", ggml's 32). In row-major order each group is a
/// contiguous run of the data, group k holding elements \f$ [kG, (k+1)G) \f$ of the flattened matrix.
///
/// The range of a group is its min–max by default; `quantize_affine` also takes a range per group
/// chosen by calibration (`tvlab/ref/calibration.hpp`), elements beyond it being clamped to the end
/// codes. Scales are stored as float; codes are computed from the stored float scale in double, so
/// that the bounds above hold up to double rounding. A group whose range is \f$ \{0\} \f$ (all zeros)
/// gets \f$ s = 0 \f$, every code z, and dequantizes to zeros; a constant group \f$ c \ne 0 \f$ has the range
/// \f$ [\min(c, 0), \max(c, 0)] \f$ and becomes an end code, which comes back as c up to the rounding of
/// s to float (a relative \f$ 2^{-24} \f$).
///
/// Rounding: to nearest with ties to even (the default, as `torch.round` and IEEE), to nearest with
/// ties away from zero (`std::round`, ggml's Q8_0), or stochastic (\f$ \lfloor y \rfloor + 1 \f$ with
/// probability \f$ y - \lfloor y \rfloor \f$, an unbiased rounding: \f$ E[\mathrm{round}(y)] = y \f$; its error
/// is below one step s instead of half).

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch08
/// Which elements share one scale (and zero point).
enum class Granularity {
  per_tensor,   ///< one scale for the whole matrix
  per_channel,  ///< one scale per row
  per_group,    ///< one scale per `group_size` consecutive elements of a row
};

/// @ingroup ch08
/// How a real \f$ y = x/s \f$ becomes an integer.
enum class Rounding {
  nearest_even,  ///< to nearest, ties to even: round(2.5) = 2, round(-0.5) = 0
  nearest_away,  ///< to nearest, ties away from zero: round(2.5) = 3, round(-0.5) = -1
  stochastic,    ///< up with probability \f$ y - \lfloor y \rfloor \f$ (unbiased), from `seed`
};

/// @ingroup ch08
/// How `quantize_affine` quantizes. The defaults: INT8, symmetric, per tensor, ties to even.
struct AffineQuantConfig {
  int bits = 8;                                    ///< b, 2 to 8
  bool symmetric = true;                           ///< \f$ [-\max|x|, \max|x|] \f$ and z = 0, or min–max with a zero point
  Granularity granularity = Granularity::per_tensor;
  std::size_t group_size = 0;                      ///< G for `per_group` (must divide the row); ignored otherwise
  Rounding rounding = Rounding::nearest_even;
  std::uint64_t seed = 0;                          ///< for `Rounding::stochastic`: one uniform draw per element
};

/// @ingroup ch08
/// A clipping range \f$ [lo, hi] \f$, \f$ lo \le 0 \le hi \f$ (symmetric: \f$ lo = -hi = -c \f$).
struct ClipRange {
  double lo = 0.0;
  double hi = 0.0;
};

/// @ingroup ch08
/// The parameters of one group: \f$ \hat x = s\,(q - z) \f$.
struct AffineParams {
  float scale = 0.0f;   ///< s (0 for a group whose range is {0})
  int zero_point = 0;   ///< z, in \f$ [0, 2^b - 1] \f$ (asymmetric), 0 (symmetric)
};

/// @ingroup ch08
/// A quantized matrix: codes in row-major order, and (s, z) per group, groups in row-major order
/// (group k covers flattened elements \f$ [k L, (k+1) L) \f$, L = `group_length`).
struct AffineQuantized {
  std::size_t rows = 0;
  std::size_t cols = 0;
  int bits = 8;
  bool symmetric = true;
  Granularity granularity = Granularity::per_tensor;
  std::size_t group_length = 0;     ///< L: rows·cols (per tensor), cols (per channel) or G
  std::vector<int> codes;           ///< rows·cols codes: \f$ [-Q, Q] \f$ or \f$ [0, 2^b - 1] \f$
  std::vector<float> scales;        ///< one s per group
  std::vector<int> zero_points;     ///< one z per group (all 0 when symmetric)
};

/// @ingroup ch08
/// The smallest and largest code: \f$ [-(2^{b-1} - 1), 2^{b-1} - 1] \f$ symmetric, \f$ [0, 2^b - 1] \f$
/// asymmetric. Error naming `bits` outside 2..8.
std::pair<int, int> code_range(int bits, bool symmetric);

/// @ingroup ch08
/// L, the number of elements per group of an x `[rows, cols]` under cfg. Errors: `bits` outside
/// 2..8, a `group_size` of 0 or one that does not divide cols (per group), an empty shape.
std::size_t affine_group_length(std::size_t rows, std::size_t cols, const AffineQuantConfig& cfg);

/// @ingroup ch08
/// The min–max range of n values, widened to contain 0: \f$ [\min(x_{min}, 0), \max(x_{max}, 0)] \f$, or
/// \f$ [-\max|x|, \max|x|] \f$ when symmetric.
ClipRange min_max_range(const float* x, std::size_t n, bool symmetric);

/// @ingroup ch08
/// (s, z) for a range: symmetric \f$ s = \max(|lo|, |hi|)/(2^{b-1} - 1) \f$, z = 0; asymmetric
/// \f$ s = (hi - lo)/(2^b - 1) \f$, \f$ z = \mathrm{clamp}(\mathrm{round}(-lo/s), 0, 2^b - 1) \f$ (ties to even).
/// s is computed in double and stored as float. Errors: a range that is not finite or does not
/// contain 0, `bits` outside 2..8.
AffineParams affine_params(ClipRange range, int bits, bool symmetric);

/// @ingroup ch08
/// y rounded to an integer by `mode`; `u` in [0, 1) is the uniform draw for `Rounding::stochastic`
/// (round up when \f$ u < y - \lfloor y \rfloor \f$), unused otherwise.
double round_with(double y, Rounding mode, double u = 0.0);

/// @ingroup ch08
/// One code: \f$ q = \mathrm{clamp}(\mathrm{round}(x/s) + z, q_{min}, q_{max}) \f$ with x/s in double
/// (z when s = 0).
int affine_code(double x, AffineParams p, int bits, bool symmetric, Rounding mode, double u = 0.0);

/// @ingroup ch08
/// Every group of x `[rows, cols]` with its own min–max range (widened to contain 0, or symmetric).
/// Errors name the parameter: `bits` outside 2..8, `group_size` (0, or not dividing cols), an empty
/// x, a non-finite value in x.
AffineQuantized quantize_affine(const Tensor2& x, const AffineQuantConfig& cfg);

/// @ingroup ch08
/// The same with a given range per group (`ranges[k]` for group k, in row-major order; a calibrated
/// clip): elements outside the range get the end codes. Errors as above, and `ranges` of the wrong
/// count or with a range that does not contain 0 or is not finite.
AffineQuantized quantize_affine(const Tensor2& x, const AffineQuantConfig& cfg, const std::vector<ClipRange>& ranges);

/// @ingroup ch08
/// \f$ \hat x = s\,(q - z) \f$ per element, `[rows, cols]`. Errors: codes, scales or zero points of
/// the wrong count for the shape, a code outside `code_range`.
Tensor2 dequantize_affine(const AffineQuantized& q);

/// @ingroup ch08
/// The documents' formula (000 L247) for one value: \f$ \mathrm{round}((x - x_{min})/(x_{max} - x_{min}) (2^b - 1)) \f$,
/// clamped to \f$ [0, 2^b - 1] \f$, in double; 0 when \f$ x_{max} = x_{min} \f$. Errors: `bits` outside 2..8,
/// \f$ x_{max} < x_{min} \f$.
int min_max_code(double x, double x_min, double x_max, int bits, Rounding mode = Rounding::nearest_even);

/// @ingroup ch08
/// The documents' inverse (000 L251): \f$ x_{min} + x_q/(2^b - 1) (x_{max} - x_{min}) \f$, in double.
double min_max_dequantize(int code, double x_min, double x_max, int bits);

/// @ingroup ch08
/// The range moved so that 0 is on the grid: \f$ [-z s, (2^b - 1 - z) s] \f$ with s and z of
/// `affine_params(range, bits, false)` (s taken as the stored float). On it the documents' formula
/// and the scale/zero-point form give the same codes.
ClipRange nudge_range(ClipRange range, int bits);

}  // namespace tvlab::ref
