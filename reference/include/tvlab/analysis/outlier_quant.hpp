#pragma once
/// @file
/// Chapter 08, activations with outliers and the two classic answers, measured on the output of a
/// layer, \f$ Y = X W \f$ (X `[tokens, d]`, W `[d, d_out]`), not on the weights alone:
///
/// - **INT8 both ways (W8A8)**: X and W rounded to 8 bits, symmetric, with one scale per tensor or
///   "vector-wise" (a scale per row of X, a token, and per column of W, an output), then multiplied
///   in integers and rescaled. A few activation channels of size 30–100, which LLMs develop
///   systematically (Dettmers et al. 2022), set the scale of every token they appear in and crush
///   the other channels into a handful of codes.
/// - **LLM.int8()** (Dettmers et al. 2022): the input channels j with \f$ \max_t |X_{tj}| > \tau \f$
///   (\f$ \tau = 6 \f$) are multiplied in floating point, \f$ X_{:,O} W_{O,:} \f$, the rest vector-wise in INT8;
///   the outliers are few channels, so almost all of the work stays in integers.
/// - **SmoothQuant** (Xiao et al. 2023): the identity \f$ X W = (X\,\mathrm{diag}(s)^{-1})(\mathrm{diag}(s)\,W) \f$ with
///   \f$ s_j = \max_t |X_{tj}|^\alpha / \max_k |W_{jk}|^{1-\alpha} \f$ moves part of each channel's range from the
///   activations into the weights (\f$ \alpha \f$ = the migration strength; 0.5 balances them), after
///   which both quantize well with one scale per tensor.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tvlab/core/tensor.hpp"

namespace tvlab::analysis {

/// @ingroup ch08
/// How W8A8 chooses its scales.
enum class Int8Scales {
  per_tensor,   ///< one scale for X, one for W
  vector_wise,  ///< one per row of X (token), one per column of W (output)
};

/// @ingroup ch08
/// \f$ \hat Y \f$ of X W with X and W rounded to INT8 (symmetric, \f$ s = \max|x| / 127 \f$, ties to even),
/// the products summed exactly (in double) and rescaled. Errors: shapes that do not fit, values
/// that are not finite.
DTensor2 w8a8_product(const DTensor2& x, const DTensor2& w, Int8Scales scales);

/// @ingroup ch08
/// LLM.int8(): the columns of X with \f$ \max_t |X_{tj}| > \tau \f$ (and the matching rows of W) in double,
/// the rest by `w8a8_product(vector_wise)`. `outlier_channels` receives how many there were.
/// Errors: as `w8a8_product`, and a threshold that is not positive.
DTensor2 llm_int8_product(const DTensor2& x, const DTensor2& w, double threshold, std::size_t* outlier_channels = nullptr);

/// @ingroup ch08
/// SmoothQuant's per-channel factors \f$ s_j \f$ for migration strength \f$ \alpha \in [0, 1] \f$ (a channel whose
/// activations or weights are all zero gets 1). Errors: \f$ \alpha \f$ outside [0, 1], shapes that do not fit.
std::vector<double> smoothing_factors(const DTensor2& x, const DTensor2& w, double alpha);

/// @ingroup ch08
/// \f$ \hat Y \f$ with X divided and W multiplied by the smoothing factors, then `w8a8_product(per_tensor)`.
DTensor2 smoothquant_product(const DTensor2& x, const DTensor2& w, double alpha);

/// @ingroup ch08
/// \f$ \lVert \hat Y - X W \rVert_F / \lVert X W \rVert_F \f$, X W in double.
double relative_output_error(const DTensor2& x, const DTensor2& w, const DTensor2& y_hat);

/// @ingroup ch08
/// Activations `[tokens, 256]` ~ N(0, 1) with the example's 4 outlier channels (7, 51, 130, 201)
/// multiplied by 30, from `seed`: more of the same distribution (AWQ's calibration and held-out sets).
DTensor2 outlier_activations(std::uint64_t seed, std::size_t tokens);

/// @ingroup ch08
/// The chapter's example: X `[64, 256]` ~ N(0, 1) with 4 channels multiplied by 30 (seeded), W
/// `[256, 256]` ~ N(0, 1/256).
void outlier_example(DTensor2& x, DTensor2& w);

}  // namespace tvlab::analysis
