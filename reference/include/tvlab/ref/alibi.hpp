#pragma once
/// @file
/// ALiBi: attention with linear biases instead of position embeddings (chapter 02).

#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// Causal: query i sees keys j <= i' (i' = i + seq_k - seq_q) with bias \f$ -m_h (i' - j) \f$, and
/// later keys get \f$ -\infty \f$ (so the bias alone is the causal mask). Symmetric (encoders):
/// \f$ -m_h |i' - j| \f$ everywhere.
enum class AlibiMode { causal, symmetric };

/// @ingroup ch02
/// The head slopes of Press et al. (2022), as their reference code computes them: for
/// \f$ n = 2^k \f$ heads, \f$ m_h = 2^{-8(h+1)/n} \f$; otherwise the slopes of the largest power of
/// two \f$ p < n \f$, followed by every other slope of the \f$ 2p \f$-head series (the first \f$ n - p \f$).
DTensor1 alibi_slopes(int num_heads);

/// Checks the inputs of `alibi_bias` (shared by every backend): positive sizes, and
/// seq_q <= seq_k when causal.
void validate_alibi(const char* function, int num_heads, long long seq_q, long long seq_k, AlibiMode mode);

/// @ingroup ch02
/// The additive bias `[num_heads, seq_q, seq_k]`, to be added to the scaled scores (it is not
/// divided by \f$ \sqrt{d_k} \f$).
Tensor3 alibi_bias(int num_heads, long long seq_q, long long seq_k, AlibiMode mode);

}  // namespace tvlab::ref
