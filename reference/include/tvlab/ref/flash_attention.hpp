#pragma once
/// @file
/// Flash attention, forward pass (chapter 04), as loops that follow the papers' pseudo-code.

#include "tvlab/core/flash_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// The parts of `FlashConfig::mask` the reference's forward and backward passes implement: all of
/// them, each score through `AttentionMask::allows` and `AttentionMask::score_bias`.
inline constexpr MaskSupport kFlashMaskSupport = kFullMaskSupport;

/// @ingroup ch04
/// Algorithm 1 of FlashAttention-2 (Dao, 2023), per head: for each query tile \f$ Q_i \f$
/// (\f$ B_r \f$ rows) keep per row a running maximum \f$ m \f$, sum \f$ \ell \f$ and unnormalised output
/// \f$ \tilde O \f$; for each key/value tile \f$ K_j, V_j \f$ (\f$ B_c \f$ rows):
/// \f[ S = \text{scale}\,Q_i K_j^\top,\quad m' = \max(m, \mathrm{rowmax}(S)),\quad
///     \tilde P = e^{S - m'},\quad \ell' = e^{m - m'}\ell + \mathrm{rowsum}(\tilde P),\quad
///     \tilde O' = e^{m - m'}\tilde O + \tilde P V_j, \f]
/// then \f$ O_i = \tilde O / \ell \f$ and \f$ L_i = m + \ln \ell \f$. \f$ S \f$ includes what `cfg.mask`
/// adds (\f$ -\infty \f$ where it forbids a key). A key tile outside the keys the causal rule and
/// the window leave to the query tile (`AttentionMask::key_range_of_rows`) is skipped whole and
/// counted in `tiles_skipped`. The arithmetic is in double; no `[seq_q, seq_k]` matrix exists, only
/// one `[B_r, B_c]` tile at a time. Equal to `ref::scaled_dot_product_attention` with the same
/// mask and scale.
/// Low precision is emulated: `cfg.fp8` rounds Q, K, V (scaled) and \f$ \tilde P \f$ to E4M3,
/// `cfg.inputs` rounds them to fp16 or bf16, as the tensor-core kernels do; the row sums
/// \f$ \ell \f$ use the unrounded weights, as FlashAttention-3 does.
FlashOutput flash_attention_forward(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg = {});

/// @ingroup ch04
/// Algorithm 2 of FlashAttention-2: the backward pass, recomputing the attention weights tile by
/// tile from the saved log-sum-exp instead of storing P. With \f$ D_i = \sum_e dO_{ie} O_{ie} \f$,
/// for each key tile \f$ j \f$ and each query tile \f$ i \f$ it sees:
/// \f[ P = e^{\text{scale}\,Q_i K_j^\top + B - L_i},\quad dV_j \mathrel{+}= P^\top dO_i,\quad
///     dP = dO_i V_j^\top,\quad dS = P \circ (dP - D_i),\quad
///     dQ_i \mathrel{+}= \text{scale}\,dS\,K_j,\quad dK_j \mathrel{+}= \text{scale}\,dS^\top Q_i. \f]
/// where \f$ B \f$ is what `cfg.mask` adds (\f$ P = 0 \f$ where it forbids a key; the pairs of tiles
/// it hides whole are skipped). `out` and `lse` come from `flash_attention_forward` with the same
/// cfg; `dout` is \f$ \partial \mathcal{L} / \partial O \f$. Arithmetic in double.
FlashGrads flash_attention_backward(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor3& out,
                                    const Tensor2& lse, const Tensor3& dout, const FlashConfig& cfg = {});

}  // namespace tvlab::ref
