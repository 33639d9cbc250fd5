#pragma once
/// @file
/// Chapter 05, the reference of Multi-head Latent Attention (MLA, DeepSeek-V2 section 2.1), in
/// plain loops with double accumulation: the projections with their low-rank compressions and the
/// decoupled RoPE, and two ways to attend against a KV cache that give the same result: `mla_naive`
/// (expand every head's key and value, cache them) and `mla_absorbed` (cache only the latent and
/// the shared RoPE key, fold the up-projections into the query and the output).

#include "tvlab/core/mla_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch05
/// What MLA computes from the new tokens' hidden states before it attends (n tokens at positions
/// \f$ p_0 \dots p_0 + n - 1 \f$).
struct MlaProjections {
  Tensor3 q_nope;     ///< \f$ q^C_{t,i} \f$ `[n_h, n, d_h]`
  Tensor3 q_rope;     ///< \f$ q^R_{t,i} \f$ `[n_h, n, d_h^R]`, rotated to position t
  Tensor2 latents;    ///< \f$ c^{KV}_t \f$ `[n, d_c]`, after its RMSNorm
  Tensor2 rope_keys;  ///< \f$ k^R_t \f$ `[n, d_h^R]`, rotated to position t
};

/// @ingroup ch05
/// The projections of MLA for the hidden states x `[n, d]` of positions
/// \f$ t = p_0 + \text{row} \f$ (DeepSeek-V2, eqs. 9-16, with the RMSNorms after the compressed
/// latents that section 3.1.2 adds):
/// \f[ c^Q_t = \mathrm{RMSNorm}(W^{DQ} h_t), \quad q^C_t = W^{UQ} c^Q_t, \quad
///     q^R_t = \mathrm{RoPE}_t(W^{QR} c^Q_t), \f]
/// \f[ c^{KV}_t = \mathrm{RMSNorm}(W^{DKV} h_t), \quad k^R_t = \mathrm{RoPE}_t(W^{KR} h_t). \f]
/// Without query compression (`q_lora_rank` absent) \f$ c^Q_t = h_t \f$. The RoPE key is computed
/// from \f$ h_t \f$, not from the latent, and is one vector for all heads. RoPE is chapter 02's
/// `apply_rope` with `cfg.rope_layout`.
/// @param x `[n, hidden_size]`
/// @param w the layer's weights, shaped for cfg
/// @param cfg the layer's dimensions
/// @param first_position \f$ p_0 \ge 0 \f$, the position of row 0
MlaProjections mla_project(const Tensor2& x, const MlaWeights& w, const MlaConfig& cfg, long long first_position = 0);

/// @ingroup ch05
/// MLA as multi-head attention over expanded keys and values (DeepSeek-V2, eqs. 12-13 and 17-19):
/// every new token's head-i key and value are built from its latent and appended to the cache,
/// \f[ k^C_{t,i} = W^{UK}_i c^{KV}_t, \quad k_{t,i} = [k^C_{t,i}; k^R_t], \quad v^C_{t,i} = W^{UV}_i c^{KV}_t, \f]
/// and each new query attends causally to every cached position:
/// \f[ o_{t,i} = \sum_{j \le t} \mathrm{softmax}_j\!\left(\frac{[q^C_{t,i}; q^R_{t,i}] \cdot k_{j,i}}{\sqrt{d_h + d_h^R}}\right) v^C_{j,i},
///     \qquad u_t = W^O [o_{t,1}; \dots; o_{t,n_h}]. \f]
/// The cache holds \f$ n_h (d_h + d_h^R + d_v) \f$ floats per token.
/// @param x the new tokens' hidden states `[n, hidden_size]`, at positions cache.tokens() onwards
/// @param w the layer's weights
/// @param cfg the layer's dimensions
/// @param cache a `MlaPath::naive` cache made for cfg; the new tokens' keys and values are appended
/// @return \f$ u_t \f$ `[n, hidden_size]`
Tensor2 mla_naive(const Tensor2& x, const MlaWeights& w, const MlaConfig& cfg, MlaCache& cache);

/// @ingroup ch05
/// MLA with the up-projections absorbed (DeepSeek-V2, section 2.1.2: "W^UK can be absorbed into
/// W^UQ, and W^UV can be absorbed into W^O"), computed as DeepSeek's inference code does: the cache
/// holds only \f$ c^{KV}_t \f$ and \f$ k^R_t \f$, each head's content query is moved into latent space,
/// \f[ \tilde q_{t,i} = W^{UK\top}_i q^C_{t,i} \in \mathbb{R}^{d_c}, \qquad
///     q^{C\top}_{t,i} k^C_{j,i} = \tilde q_{t,i}^\top c^{KV}_j, \f]
/// the weights average latents, and \f$ W^{UV} \f$ is applied once to the average:
/// \f[ o_{t,i} = W^{UV}_i \sum_{j \le t} p_{tij}\, c^{KV}_j, \qquad
///     p_{tij} = \mathrm{softmax}_j\!\left(\frac{\tilde q_{t,i}^\top c^{KV}_j + q^{R\top}_{t,i} k^R_j}{\sqrt{d_h + d_h^R}}\right). \f]
/// It is multi-query attention of width \f$ d_c + d_h^R \f$ over one shared key \f$ [c^{KV}_j; k^R_j] \f$
/// and value \f$ c^{KV}_j \f$ (the scale stays \f$ 1/\sqrt{d_h + d_h^R} \f$). Same result as `mla_naive`;
/// the cache holds \f$ d_c + d_h^R \f$ floats per token.
/// @param x the new tokens' hidden states `[n, hidden_size]`, at positions cache.tokens() onwards
/// @param w the layer's weights
/// @param cfg the layer's dimensions
/// @param cache a `MlaPath::absorbed` cache made for cfg; the new latents and RoPE keys are appended
/// @return \f$ u_t \f$ `[n, hidden_size]`
Tensor2 mla_absorbed(const Tensor2& x, const MlaWeights& w, const MlaConfig& cfg, MlaCache& cache);

/// Checks the inputs every backend's MLA layer takes, for `function`: the weights against cfg
/// (`validate_mla_weights`), x non-empty, finite and `[n, hidden_size]`. Throws `tvlab::Error`
/// naming the parameter.
void validate_mla_inputs(const char* function, const Tensor2& x, const MlaWeights& w, const MlaConfig& cfg);

/// Checks that `cache` was made for `path` and for cfg's shapes (`mla_naive` and `mla_absorbed` of
/// every backend), naming the tensor: `cache.latents has columns 10, expected 8 (kv_lora_rank)`.
void validate_mla_cache(const char* function, const MlaCache& cache, const MlaConfig& cfg, MlaPath path);

/// @ingroup ch05
/// The absorbed query-key matrix of head i, \f$ W^{UQ\top}_i W^{UK}_i \f$ `[q_in, d_c]` (stored
/// transposed as every weight here: entry \f$ (a, c) = \sum_e W^{UQ}_{a, i d_h + e} W^{UK}_{c, i d_h + e} \f$),
/// with which the content score is \f$ q^{C\top}_{t,i} k^C_{j,i} = c^{Q\top}_t (W^{UQ\top}_i W^{UK}_i)\, c^{KV}_j \f$,
/// a bilinear form that does not depend on the positions: it exists only because no rotation
/// sits between \f$ W^{UQ} \f$ and \f$ W^{UK} \f$.
/// @param w the layer's weights
/// @param cfg the layer's dimensions
/// @param head i, in [0, num_heads)
Tensor2 absorbed_qk_matrix(const MlaWeights& w, const MlaConfig& cfg, int head);

/// Checks the arguments of `absorbed_qk_matrix` (every backend's) for `function`: the weights
/// against cfg and head in [0, num_heads).
void validate_absorbed_qk_matrix(const char* function, const MlaWeights& w, const MlaConfig& cfg, int head);

}  // namespace tvlab::ref
