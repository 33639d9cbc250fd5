#pragma once
/// @file
/// Flash attention, forward pass (chapter 04), as loops that follow the papers' pseudo-code.

#include "tvlab/core/flash_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch04
/// Algorithm 1 of FlashAttention-2 (Dao, 2023), per head: for each query tile \f$ Q_i \f$
/// (\f$ B_r \f$ rows) keep per row a running maximum \f$ m \f$, sum \f$ \ell \f$ and unnormalised output
/// \f$ \tilde O \f$; for each key/value tile \f$ K_j, V_j \f$ (\f$ B_c \f$ rows):
/// \f[ S = \text{scale}\,Q_i K_j^\top,\quad m' = \max(m, \mathrm{rowmax}(S)),\quad
///     \tilde P = e^{S - m'},\quad \ell' = e^{m - m'}\ell + \mathrm{rowsum}(\tilde P),\quad
///     \tilde O' = e^{m - m'}\tilde O + \tilde P V_j, \f]
/// then \f$ O_i = \tilde O / \ell \f$ and \f$ L_i = m + \ln \ell \f$. With `causal`, a key tile whose
/// first key is later than every query of the tile may see is skipped whole. The arithmetic is
/// in double; no `[seq_q, seq_k]` matrix exists, only one `[B_r, B_c]` tile at a time.
/// Equal to `ref::scaled_dot_product_attention` with the same causal flag and scale.
FlashOutput flash_attention_forward(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg = {});

}  // namespace tvlab::ref
