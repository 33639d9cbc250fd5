#pragma once
// Double-precision oracles for chapter 00, written independently of tvlab::ref and of
// AttentionMask's member functions: the softmax through log-sum-exp, attention with the mask
// folded into the scores matrix first.

#include <string>

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::testing {

DTensor2 softmax_oracle(const Tensor2& x);
/// Whether `mask` lets query i see key j, from the definition (written out here, not by calling
/// AttentionMask): position i' = i (top_left) or i + n_k - n_q (bottom_right); causal keeps
/// j <= i', the window i' - left <= j <= i' + right, the boolean mask its true entries.
bool mask_allows_oracle(const AttentionMask& mask, std::size_t n_q, std::size_t n_k, std::size_t i, std::size_t j);
/// The scores of head h in double: scale q_i . k_j + bias_ij - m_h |i' - j| where the mask
/// allows j, -inf elsewhere (also where the bias is -inf).
/// The first part of `mask` that `supported` lacks, named as require_supported names it ("window",
/// "causal_align = top_left", "allowed", ...; in the order causal, window, alignment, allowed,
/// bias, alibi_slopes), or "" when the backend implements every part the mask uses.
std::string first_unsupported_part(const AttentionMask& mask, const MaskSupport& supported);
DTensor2 masked_scores_oracle(const Tensor3& q, const Tensor3& k, const AttentionConfig& cfg, std::size_t h);
DTensor3 sdpa_oracle(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionConfig& cfg);
/// max_hij (scale * sum_c |q_ic k_jc| + |bias_ij| + m_h |i' - j|): the size of the terms in a score,
/// which bounds its float error.
double score_magnitude(const Tensor3& q, const Tensor3& k, const AttentionConfig& cfg);
DTensor2 mha_oracle(const Tensor2& x_q, const Tensor2& x_kv, const MhaWeights& w, int num_heads,
                    const AttentionConfig& cfg);

}  // namespace tvlab::testing
