#pragma once
/// @file
/// Chapter 05, Tensor Product Attention on the CPU: the functions of `tvlab/ref/tpa.hpp`, with the
/// attention computed from the cache of factors without assembling any key or value. For head i,
/// with \f$ K_{j,i} = \frac1{R_K}\sum_s a^K_{s,i}(x_j)\, \tilde b^K_s(x_j) \f$, a score is
/// \f[ q_{t,i} \cdot K_{j,i} = \frac1{R_K} \sum_{s=1}^{R_K} a^K_{s,i}(x_j)\; \big(q_{t,i} \cdot \tilde b^K_s(x_j)\big),
/// \f] \f$ R_K \f$ products of the \f$ h \f$ queries with the cached \f$ d_h \f$-vectors \f$ \tilde b^K_s(x_j) \f$,
/// weighted by the cached head factors; and the output is \f[ o_{t,i} = \frac1{R_V} \sum_{s=1}^{R_V} \sum_j
/// \big(p_{tij}\, a^V_{s,i}(x_j)\big)\, b^V_s(x_j). \f] Both are SGEMMs over the factor cache: a step reads \f$ (R_K +
/// R_V)(h + d_h) \f$ floats per cached token, the bytes TPA saves, instead of the \f$ 2 h d_h \f$ an assembled cache
/// would hold (the paper's section 3.3; its FlashTPA decoding works from the factors in the same way).

#include "tvlab/core/tensor.hpp"
#include "tvlab/core/tpa_config.hpp"
#include "tvlab/ref/tpa.hpp"

namespace tvlab::opt {

/// @ingroup ch05
/// `ref::tpa_assemble`: \f$ X_{t,i,e} = \frac1R \sum_r a_r(x_t)_i\, b_r(x_t)_e \f$, each output row a
/// sum of R scaled rows of b (vectorised axpys), threads over the heads.
/// @param a the head factors `[R, n, h]`
/// @param b the token factors `[R, n, d_h]`
/// @return \f$ X \f$ `[h, n, d_h]`
Tensor3 tpa_assemble(const Tensor3& a, const Tensor3& b);

/// @ingroup ch05
/// `ref::tensor_product_attention`, computed from the factors (see the file's comment): the factor
/// maps as SGEMMs, RoPE on the token factors of Q and K, the new factors appended to the cache,
/// then for each new token t (position \f$ p_0 + t \f$, causal) the scores
/// \f$ S_{ji} = \frac{\text{scale}}{R_K} \sum_s a^K_{s,j,i}\, G^{(s)}_{ji} \f$ with
/// \f$ G^{(s)} = \tilde B^K_s Q_t^\top \f$ (an SGEMM of the cached \f$ \tilde b^K_s \f$ rows with the
/// token's \f$ h \f$ assembled queries), the softmax over j, and
/// \f$ O_t = \frac1{R_V} \sum_s (P \odot A^V_s)^\top B^V_s \f$ (SGEMMs). Same arguments and result
/// as the reference up to float rounding, and the same errors, except that scores beyond float's
/// range are found where they are formed (the reference refuses a bound on them, which can be
/// larger).
/// @param x the new tokens' hidden states `[n, hidden_size]`
/// @param w the layer's factor maps and output projection
/// @param cfg the layer's dimensions and ranks
/// @param cache the factors of the positions before; the new tokens' are appended
/// @return `[n, hidden_size]`
Tensor2 tensor_product_attention(const Tensor2& x, const TpaWeights& w, const TpaConfig& cfg, TpaCache& cache);

}  // namespace tvlab::opt
