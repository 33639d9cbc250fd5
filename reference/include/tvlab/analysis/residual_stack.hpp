#pragma once
/// @file
/// Post-LN vs Pre-LN residual stacks with random weights (chapter 01).
///
/// Post-LN (2017): \f$ x_{l+1} = \mathrm{LN}(x_l + F_l(x_l)) \f$ — the norm sits on the residual path.
/// Pre-LN (GPT-2 onwards): \f$ x_{l+1} = x_l + F_l(\mathrm{LN}(x_l)) \f$, with a final LN on the output.
/// \f$ F_l(x) = \mathrm{ReLU}(x W_1) W_2 \f$ with He-initialised random weights. The experiment records,
/// at every depth, the RMS of the activations and the RMS of the gradient of a fixed random linear
/// loss with respect to that layer's input.

#include <cstdint>
#include <vector>

namespace tvlab::analysis {

enum class NormPlacement { post_ln, pre_ln };
const char* norm_placement_name(NormPlacement p);

struct ResidualStackTrace {
  std::vector<double> activation_rms;  ///< [layers + 1]: input of layer l (the last entry: the stack's output)
  std::vector<double> gradient_rms;    ///< [layers + 1]: \f$ \partial L/\partial x_l \f$, same indexing
};

/// Runs `layers` blocks of width `d_model` (FFN width 4 d_model) on `tokens` random tokens.
/// Throws `tvlab::Error` for sizes <= 0.
ResidualStackTrace residual_stack(NormPlacement placement, int layers, int d_model, int tokens, std::uint64_t seed);

}  // namespace tvlab::analysis
