#pragma once
/// @file
/// Chapter 08, calibration: choosing the range \f$ [lo, hi] \f$ (symmetric: the clip c, \f$ lo = -hi = -c \f$)
/// that `quantize_affine` maps onto the codes, from sample data. The documents (000 L253): "run sample
/// data through the model, collect the distribution of each layer's activations or weights, and take
/// its extremes or a percentile (e.g. 99.9%) as the bounds, so that outliers do not stretch the range."
///
/// A narrower range trades two errors against each other: the rounding error of the elements inside
/// (about \f$ s^2/12 \f$ each, s proportional to the range) and the clipping error of those outside
/// (\f$ (|x| - c)^2 \f$ each). Three rules:
/// - **min–max**: the extremes, nothing clipped (the range widened to contain 0; symmetric
///   \f$ c = \max|x| \f$).
/// - **percentile p**: symmetric \f$ c = P_p(|x|) \f$; asymmetric \f$ lo = \min(P_{100-p}(x), 0) \f$,
///   \f$ hi = \max(P_p(x), 0) \f$. The exact percentile sorts the n values \f$ v_0 \le \dots \le v_{n-1} \f$ and
///   interpolates linearly between the closest ranks (numpy's default, "linear"; Hyndman and Fan's
///   definition 7): \f$ h = (n - 1)\,p/100 \f$, \f$ P_p = v_{\lfloor h \rfloor} + (h - \lfloor h \rfloor)(v_{\lfloor h \rfloor + 1} - v_{\lfloor h \rfloor}) \f$.
///   The histogram version (what calibrators that see the data batch by batch keep, as TensorRT's and
///   PyTorch's histogram observers do) counts the values in B equal bins of width
///   \f$ w = (v_{max} - v_{min})/B \f$, takes each of the two order statistics \f$ v_{\lfloor h \rfloor} \f$,
///   \f$ v_{\lfloor h \rfloor + 1} \f$ as the centre of the bin that holds it (found from the cumulative
///   counts), and interpolates as above. Each centre is within \f$ w/2 \f$ of the value it stands for,
///   so the estimate is within \f$ w/2 \f$ of the exact percentile (a convex combination of the two).
/// - **MSE-optimal**: the clip, among the grid \f$ c_k = \max|x| \cdot k/K \f$, \f$ k = 1 \dots K \f$, that
///   minimises the mean squared error of quantize–dequantize,
///   \f$ L(c) = \frac1n \sum_i (x_i - \hat x_i(c))^2 \f$, with \f$ \hat x_i(c) = s\,(q_i - z) \f$ the value
///   `quantize_affine` gives x_i under the range of clip c (computed in double from the float scale).
///   Asymmetric: the candidates are the min–max range shrunk toward 0, \f$ [lo\,k/K, hi\,k/K] \f$.
///   The grid includes \f$ k = K \f$, the min–max range, so the search is never worse than min–max
///   (the first minimum is taken, the smallest clip on a tie).
///
/// Inputs are n contiguous floats (a group of `quantize_affine` is such a run).

#include <cstddef>
#include <span>

#include "tvlab/ref/affine_quant.hpp"

namespace tvlab::ref {

/// @ingroup ch08
/// The exact p-th percentile of the values, \f$ 0 < p \le 100 \f$, by linear interpolation between the
/// closest ranks (above). Errors: empty data, a non-finite value, p outside (0, 100].
double percentile(std::span<const float> data, double p);

/// @ingroup ch08
/// The histogram estimate of the p-th percentile with `bins` equal bins over \f$ [\min x, \max x] \f$,
/// within half a bin width of `percentile(data, p)`. Errors as `percentile`, and `bins` = 0.
double histogram_percentile(std::span<const float> data, double p, std::size_t bins);

/// @ingroup ch08
/// The min–max range, widened to contain 0 (symmetric: \f$ [-\max|x|, \max|x|] \f$). Errors: empty or
/// non-finite data.
ClipRange calibrate_min_max(std::span<const float> data, bool symmetric);

/// @ingroup ch08
/// The percentile range: \f$ c = P_p(|x|) \f$ (symmetric) or \f$ [\min(P_{100-p}(x), 0), \max(P_p(x), 0)] \f$,
/// exact (`bins` = 0, the default) or from a histogram of `bins` bins. Errors: as `percentile`.
ClipRange calibrate_percentile(std::span<const float> data, double p, bool symmetric, std::size_t bins = 0);

/// @ingroup ch08
/// \f$ L = \frac1n \sum_i (x_i - \hat x_i)^2 \f$ in double, \f$ \hat x_i \f$ the value `quantize_affine`
/// gives \f$ x_i \f$ under `range` (nearest rounding, ties to even). Errors: empty or non-finite data, a bad
/// range or `bits`.
double quantization_mse(std::span<const float> data, ClipRange range, int bits, bool symmetric);

/// @ingroup ch08
/// The range of least `quantization_mse` among the K candidates above. Errors: empty or non-finite
/// data, `bits` outside 2..8, `K` = 0.
ClipRange calibrate_mse(std::span<const float> data, int bits, bool symmetric, std::size_t K = 100);

}  // namespace tvlab::ref
