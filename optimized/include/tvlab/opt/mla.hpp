#pragma once
/// @file
/// Chapter 05, Multi-head Latent Attention on the CPU: the functions of `tvlab/ref/mla.hpp` with
/// their products as SGEMMs and their attention as the optimized kernels. `mla_naive` attends over
/// the expanded per-head cache with chapter 00's version 2 (one SGEMM per head for the scores and
/// one for the output); `mla_absorbed` runs every new token's attention as the absorbed decode
/// step (`opt::mla_absorbed_decode_attention`: all heads as the rows of one product against the
/// shared latent cache, split over the cached positions), so that the cache is read once per token
/// for all heads. Same arguments, results up to float rounding, and errors as the reference.

#include "tvlab/core/mla_config.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/mla.hpp"

namespace tvlab::opt {

using ref::MlaProjections;

/// @ingroup ch05
/// `ref::mla_project` with the five projections as SGEMMs, the RMSNorms and RoPE as chapter 01's
/// and chapter 02's optimized versions.
/// @param x `[n, hidden_size]`
/// @param w the layer's weights, shaped for cfg
/// @param cfg the layer's dimensions
/// @param first_position \f$ p_0 \ge 0 \f$, the position of row 0
MlaProjections mla_project(const Tensor2& x, const MlaWeights& w, const MlaConfig& cfg, long long first_position = 0);

/// @ingroup ch05
/// `ref::mla_naive`: the new tokens' keys \f$ [W^{UK}_i c^{KV}_t; k^R_t] \f$ and values
/// \f$ W^{UV}_i c^{KV}_t \f$ expanded by two SGEMMs over all heads, appended to the cache, then
/// causal attention head by head (\f$ S = \text{scale}\, Q K^\top \f$ and \f$ O = P V \f$ as SGEMMs,
/// threads over the heads) and \f$ W^O \f$ as one SGEMM. Each head reads its own
/// \f$ d_h + d_h^R + d_v \f$ floats per cached token.
/// @param x the new tokens' hidden states `[n, hidden_size]`, at positions cache.tokens() onwards
/// @param w the layer's weights
/// @param cfg the layer's dimensions
/// @param cache a `MlaPath::naive` cache made for cfg; the new tokens' keys and values are appended
/// @return \f$ u_t \f$ `[n, hidden_size]`
Tensor2 mla_naive(const Tensor2& x, const MlaWeights& w, const MlaConfig& cfg, MlaCache& cache);

/// @ingroup ch05
/// `ref::mla_absorbed`: the absorbed queries \f$ \tilde q_{t,i} = W^{UK\top}_i q^C_{t,i} \f$ by one
/// SGEMM per head, then for each new token t the absorbed decode step over the first
/// \f$ p_0 + t + 1 \f$ cached positions (`opt::mla_absorbed_decode_attention`, which reads each
/// cached row \f$ [c^{KV}_j; k^R_j] \f$ once for all \f$ n_h \f$ heads), then
/// \f$ o_{t,i} = W^{UV}_i a_{t,i} \f$ by one SGEMM per head and \f$ W^O \f$. A long prompt reads the
/// cache once per token this way; DeepSeek's inference code runs prefill in the naive form and
/// decodes absorbed.
/// @param x the new tokens' hidden states `[n, hidden_size]`, at positions cache.tokens() onwards
/// @param w the layer's weights
/// @param cfg the layer's dimensions
/// @param cache a `MlaPath::absorbed` cache made for cfg; the new latents and RoPE keys are appended
/// @return \f$ u_t \f$ `[n, hidden_size]`
Tensor2 mla_absorbed(const Tensor2& x, const MlaWeights& w, const MlaConfig& cfg, MlaCache& cache);

/// @ingroup ch05
/// `ref::absorbed_qk_matrix`: \f$ W^{UQ\top}_i W^{UK}_i \f$ `[q_in, d_c]` as one SGEMM,
/// \f$ W^{UQ}_{:, i} \f$ `[q_in, d_h]` times the transpose of \f$ W^{UK}_{:, i} \f$ `[d_c, d_h]`.
/// @param w the layer's weights
/// @param cfg the layer's dimensions
/// @param head i, in [0, num_heads)
Tensor2 absorbed_qk_matrix(const MlaWeights& w, const MlaConfig& cfg, int head);

}  // namespace tvlab::opt
