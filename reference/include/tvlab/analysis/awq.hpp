#pragma once
/// @file
/// Chapter 08, AWQ (Lin et al. 2024, "AWQ: Activation-aware Weight Quantization for LLM
/// Compression and Acceleration"; 000 L257): weight-only INT4 quantization that protects the
/// weights the activations make important.
///
/// A weight row \f$ W_{j,:} \f$ (input channel j, in \f$ Y = XW \f$) matters in proportion to the size of
/// the activations it multiplies. AWQ scales each input channel before quantizing,
/// \f[ \hat Y = (X\,\mathrm{diag}(s)^{-1})\; Q(\mathrm{diag}(s)\,W), \qquad s_j = \bar a_j^{\,\alpha}, \quad \bar a_j = \frac1T \sum_t |X_{tj}|, \f]
/// so that the salient rows get a larger share of their groups' ranges and a finer relative step
/// (the division by \f$ s_j \f$ is folded into the previous operation at no cost). One exponent
/// \f$ \alpha \f$ is searched on calibration data over the grid \f$ \alpha \in \{0, \frac1{20}, \ldots, 1\} \f$,
/// minimising the output loss \f$ \lVert \hat Y - XW \rVert_F^2 \f$; \f$ \alpha = 0 \f$ is plain
/// round-to-nearest (RTN). Q is symmetric INT4 in groups of G consecutive input channels for each
/// output (AWQ's "group size 128"), \f$ s_{group} = \max|w| / 7 \f$, ties to even.

#include <cstddef>
#include <vector>

#include "tvlab/core/tensor.hpp"

namespace tvlab::analysis {

/// @ingroup ch08
/// Q(W): every column of w `[d_in, d_out]` in groups of `group` rows, symmetric INT4. Errors: an
/// empty w, a group that does not divide d_in, a value that is not finite.
DTensor2 int4_groupwise(const DTensor2& w, std::size_t group);

/// @ingroup ch08
/// \f$ (X\,\mathrm{diag}(s)^{-1})\,Q(\mathrm{diag}(s)\,W) \f$ with \f$ s_j = \bar a_j^{\,\alpha} \f$ from `calibration` (a
/// channel whose mean is 0 gets 1). Errors: shapes that do not fit, \f$ \alpha \f$ outside [0, 1].
DTensor2 awq_product(const DTensor2& x, const DTensor2& w, const DTensor2& calibration, double alpha,
                     std::size_t group);

/// @ingroup ch08
/// The search: the output loss on the calibration data for each \f$ \alpha \f$ of the grid (21 points),
/// and the best one.
struct AwqSearch {
  std::vector<double> alphas, losses;
  double best_alpha = 0.0;
};

/// @ingroup ch08
/// Runs the search of AWQ's scale exponent on `calibration` `[T, d_in]`.
AwqSearch awq_search(const DTensor2& calibration, const DTensor2& w, std::size_t group);

}  // namespace tvlab::analysis
