#pragma once
/// @file
/// Chapter 08, quantization-aware training (000 L255; 004 L214) on a problem small enough to see
/// whole: a linear layer \f$ y = W x \f$ fitted to a synthetic regression task, then quantized to b bits
/// two ways.
///
/// - **PTQ** (post-training quantization): train in float, then round every weight to the nearest
///   point of the grid \f$ s\,\{-Q, \ldots, Q\} \f$, \f$ Q = 2^{b-1} - 1 \f$, \f$ s = \max|W| / Q \f$.
/// - **QAT**: keep training, with the forward pass through the quantized weights,
///   \f$ \hat W = s\,\mathrm{clamp}(\mathrm{round}(W/s), -Q, Q) \f$ ("fake quantization"), and the backward
///   pass through the straight-through estimator (Bengio et al. 2013): round is treated as the
///   identity, so \f$ \partial L / \partial W = \partial L / \partial \hat W \f$ where \f$ |W/s| \le Q \f$, and 0 where the
///   weight is clipped. The float weights W move until their rounding fits the data, not until they
///   do.
///
/// Rounding each weight to its nearest grid point is optimal only when the inputs are uncorrelated;
/// with correlated inputs the errors of different weights add up in the output, and QAT finds
/// grid points whose errors cancel. The data here is correlated on purpose.

#include <cstdint>

namespace tvlab::analysis {

/// @ingroup ch08
/// \f$ s\,\mathrm{clamp}(\mathrm{round}(w/s), -Q, Q) \f$ with \f$ Q = 2^{b-1} - 1 \f$, ties to even. Errors: bits
/// outside 2..8, a scale that is not positive.
double fake_quantize(double w, double scale, int bits);

/// @ingroup ch08
/// The straight-through estimator's gradient factor of fake_quantize: 1 inside the clipping range
/// (\f$ |w/s| \le Q \f$), 0 outside.
double straight_through_gradient(double w, double scale, int bits);

/// @ingroup ch08
/// Mean squared errors on held-out data of the float layer, of its PTQ and of its QAT at `bits`,
/// relative to the mean squared target (so 0 is perfect and 1 is predicting zero).
struct QatResult {
  double float_error = 0.0, ptq_error = 0.0, qat_error = 0.0;
};

/// @ingroup ch08
/// The experiment: W* `[8, 32]` ~ N(0, 1), inputs x = A z with A `[32, 32]` ~ N(0, 1/32) (correlated),
/// z ~ N(0, I), targets W* x + 0.01 N(0, 1); 1024 training and 1024 test samples (seeded). The float
/// layer is fitted by full-batch gradient descent (2000 steps, step \f$ 1 / \lambda_{max} \f$ of the
/// inputs' second-moment matrix); QAT continues from it for 2000 steps of a tenth of that size, with
/// the scale of its PTQ, and keeps the quantized weights of lowest training error (PTQ's are the
/// first candidates, so QAT can only match or improve on the training data; the test data decides).
/// Errors: bits outside 2..8.
QatResult qat_experiment(int bits, std::uint64_t seed);

}  // namespace tvlab::analysis
