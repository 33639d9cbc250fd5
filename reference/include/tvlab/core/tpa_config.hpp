#pragma once
/// @file
/// Chapter 05: the shape of Tensor Product Attention (TPA, Zhang et al. 2025, "Tensor Product
/// Attention Is All You Need", the attention of the T6 model), its weights and its cache of factors.

#include <cstddef>

#include "tvlab/core/rope_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab {

/// @ingroup ch05
/// The dimensions of one TPA layer (paper symbols: \f$ d_{model}, h, d_h, R_Q, R_K, R_V \f$).
struct TpaConfig {
  int hidden_size = 32;   ///< \f$ d_{model} \f$
  int num_heads = 4;      ///< \f$ h \f$
  int head_dim = 8;       ///< \f$ d_h \f$ (even: RoPE rotates pairs)
  int q_rank = 6;         ///< \f$ R_Q \f$, the number of tensor products summed into a query
  int k_rank = 2;         ///< \f$ R_K \f$
  int v_rank = 2;         ///< \f$ R_V \f$
  double rope_theta = 10000.0;                 ///< RoPE base
  RopeLayout rope_layout = RopeLayout::half_split;  ///< T6 builds on LLaMA, whose RoPE pairs \f$ (i, i + d_h/2) \f$
};

/// Checks a TPA configuration for `function`: sizes and ranks positive, head_dim even, rope_theta > 1;
/// throws `tvlab::Error` naming the field (`q_rank (0) must be positive`).
void validate_tpa_config(const char* function, const TpaConfig& cfg);

/// @ingroup ch05
/// How one of Q, K, V is factored, for rank R: \f$ X_t = \frac1R \sum_{r=1}^{R} a_r(x_t) \otimes b_r(x_t) \f$
/// with \f$ a_r \in \mathbb{R}^h \f$ (over heads) and \f$ b_r \in \mathbb{R}^{d_h} \f$ (over the head
/// dimension). The token factors are always contextual, \f$ b_r(x_t) = W^b_r x_t \f$: `w_b` is
/// `[d_model, R d_h]` with \f$ b_r \f$ in columns \f$ [r d_h, (r+1) d_h) \f$. The head factors are
/// either contextual, \f$ a_r(x_t) = W^a_r x_t \f$ with `w_a` `[d_model, R h]` (\f$ a_r \f$ in columns
/// \f$ [r h, (r+1) h) \f$), or, when `w_a` is empty, the fixed rows of `a` `[R, h]` (the paper's
/// "non-contextual A", section 4, through which MHA, MQA and GQA are special cases of TPA).
struct TpaFactorMap {
  Tensor2 w_a;  ///< \f$ W^a \f$ `[d_model, R h]`, or empty for fixed head factors
  Tensor2 a;    ///< fixed head factors `[R, h]`, used only when `w_a` is empty
  Tensor2 w_b;  ///< \f$ W^b \f$ `[d_model, R d_h]`
};

/// @ingroup ch05
/// The weights of one TPA layer: the factor maps of Q, K and V (ranks `q_rank`, `k_rank`,
/// `v_rank`) and the output projection `w_o` `[h d_h, d_model]` (\f$ W^O \f$, eq. 3.3).
struct TpaWeights {
  TpaFactorMap q, k, v;
  Tensor2 w_o;
};

/// Checks the weights' shapes against `cfg` (and that they are finite) for `function`, naming the
/// weight: `tensor_product_attention: k.w_b has columns 15, expected 16 (k_rank * head_dim)`.
void validate_tpa_weights(const char* function, const TpaWeights& w, const TpaConfig& cfg);

/// @ingroup ch05
/// The KV cache of one TPA layer for one sequence: the factors of every past token's key and value,
/// \f$ A^K(x_t), B^K(x_t) \f$ (pre-rotated by RoPE to position t, eq. 3.5), \f$ A^V(x_t), B^V(x_t) \f$;
/// position t is index t of axis 1. `tensor_product_attention` appends the new tokens' factors, and
/// leaves the cache unchanged when it throws.
struct TpaCache {
  /// An empty cache shaped for `cfg`.
  explicit TpaCache(const TpaConfig& cfg);

  Tensor3 a_k;  ///< `[R_K, tokens, h]`
  Tensor3 b_k;  ///< `[R_K, tokens, d_h]`, rotated to each token's position
  Tensor3 a_v;  ///< `[R_V, tokens, h]`
  Tensor3 b_v;  ///< `[R_V, tokens, d_h]`

  /// The number of positions held.
  std::size_t tokens() const;
  /// The number of floats held: tokens times `tpa_cache_floats_per_token`.
  std::size_t floats() const;
};

/// @ingroup ch05
/// The numbers TPA caches per token and layer (paper, section 3.3):
/// \f$ R_K (h + d_h) + R_V (h + d_h) = (R_K + R_V)(h + d_h) \f$, against \f$ 2 h d_h \f$ for MHA.
/// (Fixed head factors would not need caching, Table 1's "non-contextual A" row
/// \f$ (R_K + R_V) d_h \f$; this cache keeps them per token all the same.)
std::size_t tpa_cache_floats_per_token(const TpaConfig& cfg);

}  // namespace tvlab
