#pragma once
/// @file
/// Chapter 08, how large the error of affine quantization is (000 L255: "the error depends on the
/// precision and on the distribution of the parameters"): the root-mean-square error
/// \f$ \mathrm{RMSE} = \sqrt{\frac1N \sum_i (x_i - \hat x_i)^2} \f$ of quantize–dequantize for a matrix,
/// with every group's range chosen by one calibration rule (`tvlab/ref/calibration.hpp`), and the table
/// of it over bits, granularities and rules that the lesson prints.

#include <cstddef>
#include <string>
#include <vector>

#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/affine_quant.hpp"

namespace tvlab::analysis {

/// @ingroup ch08
/// How each group's range is chosen.
enum class ClipRule {
  min_max,     ///< the extremes (`ref::calibrate_min_max`)
  percentile,  ///< the exact percentile p of the group (`ref::calibrate_percentile`)
  mse,         ///< the least-MSE clip among K candidates (`ref::calibrate_mse`)
};

/// @ingroup ch08
/// "min-max", "p99.9", "MSE".
std::string clip_rule_name(ClipRule rule, double p = 99.9);

/// @ingroup ch08
/// The ranges, one per group of `cfg`, chosen by `rule` from the group's own values (percentile `p`,
/// `K` candidates for MSE). Errors as `ref::quantize_affine` and the calibration functions.
std::vector<ref::ClipRange> calibrate_groups(const Tensor2& x, const ref::AffineQuantConfig& cfg, ClipRule rule,
                                             double p = 99.9, std::size_t K = 100);

/// @ingroup ch08
/// \f$ \sqrt{\frac1N \sum_i (x_i - \hat x_i)^2} \f$ in double, \f$ \hat x \f$ = `ref::dequantize_affine` of
/// `ref::quantize_affine(x, cfg, calibrate_groups(x, cfg, rule, p, K))`.
double affine_rmse(const Tensor2& x, const ref::AffineQuantConfig& cfg, ClipRule rule, double p = 99.9,
                   std::size_t K = 100);

/// @ingroup ch08
/// The chapter's test weights, the same in every table of the lesson: `Rng(808).normal_matrix(256, 1024)`,
/// and with `outliers` 1% of them (drawn from the same generator, in element order) multiplied by 20.
Tensor2 lesson_weights(bool outliers);

/// @ingroup ch08
/// One row of the table: a configuration and its RMSE.
struct QuantErrorRow {
  int bits = 8;
  std::string granularity;  ///< "per tensor", "per channel", "per group 32", ...
  ClipRule rule = ClipRule::min_max;
  double rmse = 0.0;
};

/// @ingroup ch08
/// RMSE of symmetric quantization of x at 8 and 4 bits, per tensor, per channel, per group of 32 and
/// of 128 (the groups must divide the row), with min–max, percentile 99.9 and MSE-optimal (K = 100)
/// clipping: 24 rows, bits outermost, then granularity, then rule.
std::vector<QuantErrorRow> quant_error_table(const Tensor2& x);

}  // namespace tvlab::analysis
