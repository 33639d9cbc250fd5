#pragma once
// Double-precision oracles for chapter 00, written independently of tvlab::ref: the softmax
// through log-sum-exp, attention with the masks folded into the scores matrix first.

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::testing {

DTensor2 softmax_oracle(const Tensor2& x);
DTensor3 sdpa_oracle(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionConfig& cfg);
/// max_ij scale * sum_c |q_ic k_jc|: the size of the terms in a score, which bounds its float error.
double score_magnitude(const Tensor3& q, const Tensor3& k, const AttentionConfig& cfg);
DTensor2 mha_oracle(const Tensor2& x_q, const Tensor2& x_kv, const MhaWeights& w, int num_heads,
                    const AttentionConfig& cfg);

}  // namespace tvlab::testing
