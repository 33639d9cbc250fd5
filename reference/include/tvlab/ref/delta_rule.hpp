#pragma once
/// @file
/// Chapter 06, the reference of the delta-rule family, in plain loops with double accumulation.
/// One step, for each head, in the order the papers define it (Yang et al. 2024, "Gated Delta
/// Networks", eq. 10; Kimi Linear, eq. 1 for the per-channel gate; fla's
/// `fused_recurrent_gated_delta_rule`):
/// \f[ \tilde S = D_t S_{t-1}, \quad D_t = \mathrm{diag}(e^{g_t}) \quad \text{(decay)}, \f]
/// \f[ u_t = \beta_t \big(v_t - \tilde S^\top k_t\big) \quad \text{(predict with the decayed state)}, \f]
/// \f[ S_t = \tilde S + k_t u_t^\top \quad \text{(write)}, \qquad o_t = S_t^\top (\text{scale}\; q_t) \quad \text{(read)}. \f]
/// Without the subtraction (`DeltaRuleConfig::delta` false) \f$ u_t = \beta_t v_t \f$. The members:
/// | model | gate | delta |
/// | --- | --- | --- |
/// | linear attention | none | no |
/// | RetNet / Mamba-2 SSD / simple GLA (decayed linear attention) | scalar | no |
/// | GLA | per channel | no |
/// | DeltaNet | none | yes |
/// | Gated DeltaNet | scalar | yes |
/// | KDA | per channel | yes |
///
/// Shapes: q, k `[h, T, d_k]`, v `[h, T, d_v]`, beta `[h, T]` with \f$ \beta_t \in [0, 1] \f$, the gate
/// as `DeltaRuleGate` says, the state `[h, d_k, d_v]`.

#include <cstddef>

#include "tvlab/core/delta_rule_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch06
/// The recurrence above, token by token from `initial_state` (zeros when empty).
/// Errors name the parameter: beta outside [0, 1], a positive log gate, both gates given, d_k of q
/// and k that differ, shapes that do not agree, non-finite input, a scale that is not positive, a
/// zero q or k row to normalise. A state or output beyond float's range is an error too: the delta
/// rule multiplies the state by \f$ I - \beta_t k_t k_t^\top \f$, whose eigenvalue along \f$ k_t \f$ is
/// \f$ 1 - \beta_t \|k_t\|^2 \f$, so keys with \f$ \beta_t \|k_t\|^2 > 2 \f$ make it grow (the message
/// says so; `cfg.l2_normalize_qk` keeps it bounded).
/// @param q `[h, T, d_k]`
/// @param k `[h, T, d_k]`
/// @param v `[h, T, d_v]`
/// @param beta `[h, T]`, the writing strength \f$ \beta_t \f$
/// @param gate the forget gate in log space (empty: none)
/// @param cfg delta rule or not, scale, L2 normalisation of q and k
/// @param initial_state `[h, d_k, d_v]`, or empty for zeros
DeltaRuleOutput delta_rule_recurrent(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor2& beta,
                                     const DeltaRuleGate& gate, const DeltaRuleConfig& cfg,
                                     const Tensor3& initial_state = Tensor3::from_shape({0, 0, 0}));

/// @ingroup ch06
/// The same outputs and final state computed chunk by chunk (the WY representation with the UT
/// transform; Yang et al. 2024, "Parallelizing Linear Transformers with the Delta Rule over
/// Sequence Length", section 3; Gated DeltaNet, section 3.3). Within a chunk of C positions, with
/// the cumulative log gate \f$ G_i = \sum_{s \le i} g_s \f$ (from the chunk's start) and the
/// decayed key products \f$ A_{ij} = \sum_c k_i[c]\, k_j[c]\, e^{G_i[c] - G_j[c]} \f$:
/// \f[ U = \big(I + \mathrm{StrictLower}(\mathrm{diag}(\beta) A)\big)^{-1} \mathrm{diag}(\beta)\,
///        \big(V - (K \odot e^{G})\, S_0\big), \f]
/// (a unit lower-triangular solve), then
/// \f[ o_i = S_0^\top (e^{G_i} \odot \text{scale}\,q_i) + \sum_{j \le i} u_j\, \big(k_j^\top \mathrm{diag}(e^{G_i - G_j})\, \text{scale}\,q_i\big), \qquad
///     S_C = \mathrm{diag}(e^{G_C}) S_0 + \sum_j \mathrm{diag}(e^{G_C - G_j})\, k_j u_j^\top. \f]
/// Gates enter only as differences \f$ e^{G_i - G_j} \f$ with \f$ j \le i \f$ (never as \f$ e^{G_i} e^{-G_j} \f$,
/// which overflows for long chunks and strong decay). C = 1 is the recurrence. Without the delta
/// rule the solve is the identity.
/// Errors as `delta_rule_recurrent`'s, and a chunk_size of 0.
/// @param chunk_size C >= 1; the last chunk may be shorter, and C > T is one chunk
DeltaRuleOutput delta_rule_chunked(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor2& beta,
                                   const DeltaRuleGate& gate, const DeltaRuleConfig& cfg, std::size_t chunk_size,
                                   const Tensor3& initial_state = Tensor3::from_shape({0, 0, 0}));

/// @ingroup ch06
/// The input checks both functions above start with (shapes, finiteness, beta in [0, 1], log gates
/// <= 0, one gate at most, the scale), under the name `fn`; public so that other implementations
/// of the family reject the same inputs with the same messages. The zero q or k row that
/// `cfg.l2_normalize_qk` cannot divide is found later, when the rows are normalised.
/// @param scan_qkv false skips the scans of q, k and v for values that are not finite (the three
///        largest inputs, one pass each): for an implementation that reads them anyway and checks
///        them as it goes. It must then call again with true when it finds one, or when any other
///        check fails, so that the caller gets the first error in this function's order.
void validate_delta_rule(const char* fn, const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor2& beta,
                         const DeltaRuleGate& gate, const DeltaRuleConfig& cfg, const Tensor3& initial_state,
                         bool scan_qkv = true);

}  // namespace tvlab::ref
