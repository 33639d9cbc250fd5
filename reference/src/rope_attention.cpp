#include "tvlab/ref/rope_attention.hpp"

#include "tvlab/ref/attention.hpp"
#include "tvlab/ref/rope.hpp"

namespace tvlab::ref {

Tensor3 rope_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionRope& rope,
                       const AttentionConfig& cfg) {
  const char* fn = "rope_attention";
  // The scores are formed from the rotated q and k: the float-range check uses their bound.
  const double growth = validate_attention_rope(fn, rope, q.shape()[1], k.shape()[1], q.shape()[2]);
  validate_attention(fn, q, k, v, cfg, growth);
  // q'_i = R(p0 + seq_k - seq_q + i) q_i,  k'_j = R(p0 + j) k_j.
  const auto query_shift = static_cast<long long>(k.shape()[1] - q.shape()[1]);
  const Tensor3 q_rotated = apply_rope(q, rope.freqs, rope.layout, rope.first_position + query_shift);
  const Tensor3 k_rotated = apply_rope(k, rope.freqs, rope.layout, rope.first_position);
  return scaled_dot_product_attention(q_rotated, k_rotated, v, cfg);
}

}  // namespace tvlab::ref
