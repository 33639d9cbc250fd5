#pragma once
/// @file
/// Chapter 05, the reference of Tensor Product Attention (TPA, Zhang et al. 2025, "Tensor Product
/// Attention Is All You Need", section 3), in plain loops with double accumulation: every token's
/// queries, keys and values are sums of a few tensor products of contextual factors, the KV cache
/// holds the factors, and RoPE rotates the token factors before they are cached.

#include "tvlab/core/tensor.hpp"
#include "tvlab/core/tpa_config.hpp"

namespace tvlab::ref {

/// @ingroup ch05
/// Assembles a TPA tensor from its factors, token by token (paper, eq. 3.1):
/// \f[ X_t = \frac1R \sum_{r=1}^{R} a_r(x_t) \otimes b_r(x_t), \qquad
///     X_{t,i,e} = \frac1R \sum_{r} a_{r,i}(x_t)\, b_{r,e}(x_t). \f]
/// @param a the head factors `[R, n, h]`: \f$ a_r(x_t) \f$ is `a(r, t, :)`
/// @param b the token factors `[R, n, d_h]`: \f$ b_r(x_t) \f$ is `b(r, t, :)`
/// @return \f$ X \f$ in the attention layout `[h, n, d_h]`
Tensor3 tpa_assemble(const Tensor3& a, const Tensor3& b);

/// @ingroup ch05
/// Tensor Product Attention over a KV cache of factors. For the new tokens, at positions
/// \f$ t = p_0 \dots p_0 + n - 1 \f$ with \f$ p_0 \f$ = cache.tokens():
/// - the factors \f$ a^Q_r(x_t), b^Q_r(x_t), \dots \f$ (`TpaFactorMap`: \f$ W^b x_t \f$, and \f$ W^a x_t \f$ or fixed);
/// - RoPE on the token factors of Q and K, \f$ \tilde b_r(x_t) = \mathrm{RoPE}_t(b_r(x_t)) \f$ (eq. 3.5):
///   since RoPE acts on the head dimension alone, \f$ \mathrm{RoPE}_t(Q_t) = \frac1{R_Q}\sum_r a^Q_r \otimes \tilde b^Q_r \f$
///   (Theorem 3.1), so the cached key factors are already rotated;
/// - the new \f$ A^K, \tilde B^K, A^V, B^V \f$ appended to the cache, and every head attends causally
///   over all cached positions (eq. 3.2-3.3):
/// \f[ \text{head}_i = \mathrm{softmax}\!\left(\frac{Q_i K_i^\top}{\sqrt{d_h}}\right) V_i, \qquad
///     u_t = W^O [\text{head}_1; \dots; \text{head}_h]_t, \f]
/// with \f$ Q, K, V \f$ assembled by `tpa_assemble` from the factors.
/// @param x the new tokens' hidden states `[n, hidden_size]`
/// @param w the layer's factor maps and output projection
/// @param cfg the layer's dimensions and ranks
/// @param cache the factors of the positions before; the new tokens' are appended
/// @return `[n, hidden_size]`
Tensor2 tensor_product_attention(const Tensor2& x, const TpaWeights& w, const TpaConfig& cfg, TpaCache& cache);

/// Checks the factors `tpa_assemble` takes (every backend's) for `function`: both non-empty and
/// finite, b with a's ranks and tokens.
void validate_tpa_factors(const char* function, const Tensor3& a, const Tensor3& b);

/// Checks a call of `tensor_product_attention` (every backend's) for `function`: the weights against
/// cfg (`validate_tpa_weights`), x non-empty, finite and `[n, hidden_size]`, and the cache's four
/// tensors shaped for cfg with one count of tokens. Throws `tvlab::Error` naming the parameter.
void validate_tpa_call(const char* function, const Tensor2& x, const TpaWeights& w, const TpaConfig& cfg,
                       const TpaCache& cache);

}  // namespace tvlab::ref
