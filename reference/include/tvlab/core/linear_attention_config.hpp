#pragma once
/// @file
/// Chapter 06's configuration types: the feature map of kernelised linear attention, whether its
/// output is normalised, and the recurrent state that causal linear attention carries from one
/// token (or one chunk of a sequence) to the next.

#include <string>

#include "tvlab/core/tensor.hpp"

namespace tvlab {

/// @ingroup ch06
/// The feature map \f$ \phi \f$ applied to every query and key row before the kernel
/// \f$ \mathrm{sim}(q, k) = \phi(q)^\top \phi(k) \f$ replaces \f$ \exp(q^\top k / \sqrt{d}) \f$:
/// - `elu_plus_one`: \f$ \phi(x) = \mathrm{elu}(x) + 1 \f$, elementwise, strictly positive
///   (Katharopoulos et al. 2020, the Linear Transformer);
/// - `relu`: \f$ \phi(x) = \max(0, x) \f$, non-negative (the documents' worked example);
/// - `identity`: \f$ \phi(x) = x \f$, no feature map (the kernel \f$ q^\top k \f$ can be negative; used
///   unnormalised, it is the linear attention of the delta-rule family's base case).
enum class FeatureMap { elu_plus_one, relu, identity };

/// "elu_plus_one", "relu", "identity".
std::string to_string(FeatureMap map);

/// @ingroup ch06
/// How a linear attention computes its output from the kernel \f$ \phi(q)^\top \phi(k) \f$.
struct LinearAttentionConfig {
  FeatureMap feature_map = FeatureMap::elu_plus_one;
  /// true: \f$ o_i = \phi(q_i)^\top S / \phi(q_i)^\top z \f$ (weights that sum to 1, the kernelised
  /// attention of the documents and of the Linear Transformer); false: the numerator alone,
  /// \f$ o_i = \phi(q_i)^\top S \f$, as the linear attention of fla and of the delta-rule papers.
  bool normalize = true;
  /// Multiplies \f$ \phi(q) \f$ before the readout (fla's convention: the scale is applied to q);
  /// 1 when absent. A normalised output does not depend on it.
  double scale = 1.0;
};

/// @ingroup ch06
/// What causal linear attention carries between tokens, per head (position t's state sums over
/// positions 0..t): \f$ S = \sum_j \phi(k_j) v_j^\top \f$ `[h, m, d_v]` (m: the feature dimension,
/// the key width for the elementwise maps) and the normaliser \f$ z = \sum_j \phi(k_j) \f$ `[h, m]`.
/// An empty state (no token yet) holds zeros; `LinearAttentionState(h, m, d_v)` makes one.
struct LinearAttentionState {
  LinearAttentionState() = default;
  LinearAttentionState(std::size_t heads, std::size_t features, std::size_t value_dim);
  Tensor3 s;  ///< `[h, m, d_v]`
  Tensor2 z;  ///< `[h, m]`
};

}  // namespace tvlab
