#pragma once
/// @file
/// Configuration shared by every attention implementation (`ref`, `opt`, `cuda`, `student`).

#include <optional>

#include "tvlab/core/rope_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab {

/// Rotary position embedding applied to q and k inside attention (chapter 02). Key j sits at
/// position \f$ p_0 + j \f$ and query i at \f$ p_0 + (n_k - n_q) + i \f$: the queries are the
/// last \f$ n_q \f$ of the \f$ n_k \f$ positions, as with a KV cache.
struct AttentionRope {
  RopeFrequencies freqs;                       ///< from `rope_frequencies(cfg)`
  RopeLayout layout = RopeLayout::half_split;  ///< which coordinates form a pair
  long long first_position = 0;                ///< \f$ p_0 \f$, the position of key 0
};

/// How scaled dot-product attention scores are formed and masked.
///
/// Scores are \f$ S = \text{scale}\cdot QK^\top + B \f$ where \f$ B \f$ is the additive mask
/// (if any), then entries forbidden by the causal rule (\f$ j > i + (n_k - n_q) \f$) or by
/// the boolean mask (`false`) are set to \f$ -\infty \f$. A row with every entry forbidden
/// produces an output of zeros (FlashAttention's convention), never NaN.
struct AttentionConfig {
  bool causal = false;                  ///< query i sees keys j <= i + (seq_k - seq_q)
  std::optional<double> scale;          ///< default \f$ 1/\sqrt{d_k} \f$ (d_k = head_dim)
  std::optional<Mask2> mask;            ///< `[seq_q, seq_k]`, true = may attend (all heads)
  std::optional<Tensor2> additive_mask; ///< `[seq_q, seq_k]`, added to the scaled scores; -inf forbids
  /// Chapter 02: rotate q and k before the scores (positions as in `AttentionRope`).
  std::optional<AttentionRope> rope;
  /// Chapter 02, ALiBi: `[heads]` slopes \f$ m_h \f$; adds \f$ -m_h\,|i' - j| \f$ to the scaled
  /// scores, \f$ i' = i + n_k - n_q \f$ (with `causal`, only \f$ j \le i' \f$ remain: \f$ -m_h (i' - j) \f$).
  std::optional<DTensor1> alibi_slopes;
};

/// Projection weights of multi-head attention, stored so that \f$ Q = X W_q \f$:
/// `w_q`, `w_k`, `w_v` are `[d_model, num_heads * head_dim]`, `w_o` is `[num_heads * head_dim, d_model]`.
struct MhaWeights {
  Tensor2 w_q, w_k, w_v, w_o;
};

}  // namespace tvlab

namespace tvlab {

/// Checks q, k, v and cfg for `function` and returns the score scale to use.
/// Throws `tvlab::Error` naming the parameter: matching heads/head_dim/seq_k, empty tensors,
/// non-finite values, mask shapes, a scale that is not positive or not representable in float,
/// and inputs whose scores could overflow float (every backend computes them in float):
/// \f$ d_k \max|q| \max|k| \f$ and \f$ \text{scale}\cdot d_k \max|q| \max|k| + \max|B| \f$ must stay below
/// \f$ 10^{38} \f$ (with RoPE, \f$ \max|q| \f$ and \f$ \max|k| \f$ grow by \f$ \sqrt{2}\,a_f \f$; ALiBi adds
/// \f$ \max_h m_h\,(n_k - 1) \f$ to \f$ \max|B| \f$).
double validate_attention(const char* function, const Tensor3& q, const Tensor3& k, const Tensor3& v,
                          const AttentionConfig& cfg);

/// The checks of `cfg` alone for `heads` heads, sequences of lengths seq_q, seq_k and head
/// dimension head_dim (mask shapes, causal with seq_q <= seq_k, the scale, the RoPE frequencies
/// and ALiBi slopes against head_dim and heads); returns the scale.
double validate_attention_config(const char* function, std::size_t heads, std::size_t seq_q, std::size_t seq_k,
                                 std::size_t head_dim, const AttentionConfig& cfg);

/// Checks the inputs of multi-head attention (including cfg, against the sequence lengths of
/// x_q and x_kv) and returns head_dim = (columns of w_q) / num_heads.
std::size_t validate_mha(const char* function, const Tensor2& x_q, const Tensor2& x_kv, const MhaWeights& w,
                         int num_heads, const AttentionConfig& cfg);

/// Whether query `i` may look at key `j` under the causal rule and the boolean mask.
/// With seq_q != seq_k the causal diagonal is aligned to the bottom right, as in
/// FlashAttention and PyTorch's `is_causal` with a KV cache: key j is visible to query i
/// when \f$ j \le i + (n_k - n_q) \f$.
inline bool attention_allowed(const AttentionConfig& cfg, std::size_t seq_q, std::size_t seq_k, std::size_t i,
                              std::size_t j) {
  if (cfg.causal && j + seq_q > i + seq_k) return false;
  if (cfg.mask && !(*cfg.mask)(i, j)) return false;
  return true;
}

}  // namespace tvlab
