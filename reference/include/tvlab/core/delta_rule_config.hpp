#pragma once
/// @file
/// Chapter 06's configuration of the delta-rule family: one recurrence over a matrix state
/// \f$ S \in \mathbb{R}^{d_k \times d_v} \f$ per head, whose parameters give linear attention,
/// decayed linear attention (RetNet, Mamba-2's SSD, GLA), DeltaNet, Gated DeltaNet and Kimi Delta
/// Attention (KDA). Conventions as flash-linear-attention (fla): the state is \f$ [d_k, d_v] \f$ and
/// is read as \f$ o_t = S_t^\top q_t \f$ (papers that keep \f$ S \in \mathbb{R}^{d_v \times d_k} \f$ write
/// \f$ S_t q_t \f$ and \f$ S_t = S_{t-1} + v_t k_t^\top \f$, the transpose of everything here); gates are
/// given in log space, \f$ g_t = \log \alpha_t \le 0 \f$; the scale multiplies q at the readout.

#include <optional>

#include "tvlab/core/tensor.hpp"

namespace tvlab {

/// @ingroup ch06
/// The forget gate of a step, in log space (empty tensors: no gate, \f$ \alpha_t = 1 \f$). At most
/// one of the two is given:
/// - `scalar` `[h, T]`: \f$ g_t = \log \alpha_t \le 0 \f$, one number per head and token, every
///   row of S decayed alike (Gated DeltaNet; RetNet's and Mamba-2's scalar decay);
/// - `per_channel` `[h, T, d_k]`: \f$ g_t[i] = \log \alpha_t[i] \le 0 \f$, row i of S decayed by its
///   own \f$ \alpha_t[i] \f$ (KDA; GLA's gate).
struct DeltaRuleGate {
  Tensor2 scalar;
  Tensor3 per_channel;
};

/// @ingroup ch06
/// Which member of the family a call computes.
struct DeltaRuleConfig {
  /// true: the delta rule, \f$ S_t = D_t S_{t-1} + \beta_t k_t (v_t - (D_t S_{t-1})^\top k_t)^\top \f$,
  /// the state corrected toward \f$ v_t \f$ at key \f$ k_t \f$; false: no subtraction,
  /// \f$ S_t = D_t S_{t-1} + \beta_t k_t v_t^\top \f$ (linear attention, decayed when gated).
  bool delta = true;
  /// Multiplies q at the readout; \f$ 1/\sqrt{d_k} \f$ when absent (fla's default).
  std::optional<double> scale;
  /// Divides every q and k row by its L2 norm before the recurrence (fla's
  /// `use_qk_l2norm_in_kernel`; DeltaNet needs keys of norm at most 1 to stay stable).
  bool l2_normalize_qk = false;
};

/// @ingroup ch06
/// The outputs of a sequence and the state after its last token.
struct DeltaRuleOutput {
  Tensor3 o;      ///< `[h, T, d_v]`
  Tensor3 state;  ///< `[h, d_k, d_v]`, \f$ S_T \f$
};

}  // namespace tvlab
