#pragma once
/// @file
/// Configuration shared by every attention implementation (`ref`, `opt`, `cuda`, `student`).

#include <optional>

#include "tvlab/core/attention_mask.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab {

/// How scaled dot-product attention scores are formed and masked:
/// \f$ S_{hij} = \text{scale}\cdot q_{hi} \cdot k_{hj} \f$ plus what `mask` adds, \f$ -\infty \f$ where
/// `mask` forbids key j to query i (see `AttentionMask`). A row with every entry forbidden
/// produces an output of zeros (FlashAttention's convention), never NaN.
struct AttentionConfig {
  std::optional<double> scale;  ///< default \f$ 1/\sqrt{d_k} \f$ (d_k = head_dim)
  AttentionMask mask;           ///< causal (with its alignment), window, boolean mask, bias, ALiBi
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
/// non-finite values, the mask (`validate_attention_mask`), a scale that is not positive or not
/// representable in float, and inputs whose scores could overflow float (every backend computes
/// them in float): \f$ d_k \max|q| \max|k| \f$ and \f$ \text{scale}\cdot d_k \max|q| \max|k| + \max|B| \f$
/// must stay below \f$ 10^{38} \f$, where \f$ \max|B| \f$ is the largest finite |bias| plus
/// \f$ \max_h m_h\,(\max(n_q, n_k) - 1) \f$ for ALiBi. `qk_growth` (>= 0) multiplies \f$ \max|q| \f$
/// and \f$ \max|k| \f$ for a caller that transforms q and k first (RoPE: \f$ \sqrt2\,a_f \f$).
double validate_attention(const char* function, const Tensor3& q, const Tensor3& k, const Tensor3& v,
                          const AttentionConfig& cfg, double qk_growth = 1.0);

/// `validate_attention` for a caller that keeps the scale and the mask apart (flash attention's
/// `FlashConfig`).
double validate_attention(const char* function, const Tensor3& q, const Tensor3& k, const Tensor3& v,
                          const std::optional<double>& scale, const AttentionMask& mask, double qk_growth = 1.0);

/// The checks of `cfg` alone for `heads` heads, sequences of lengths seq_q, seq_k and head
/// dimension head_dim (the mask, and the scale); returns the scale.
double validate_attention_config(const char* function, std::size_t heads, std::size_t seq_q, std::size_t seq_k,
                                 std::size_t head_dim, const AttentionConfig& cfg);

/// Checks the inputs of multi-head attention (including cfg, against the sequence lengths of
/// x_q and x_kv) and returns head_dim = (columns of w_q) / num_heads.
std::size_t validate_mha(const char* function, const Tensor2& x_q, const Tensor2& x_kv, const MhaWeights& w,
                         int num_heads, const AttentionConfig& cfg);

}  // namespace tvlab
