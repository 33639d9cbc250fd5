#include "tvlab/opt/gqa_attention.hpp"

#include <cstddef>
#include <cstdint>

#include "detail/attention_heads.hpp"
#include "detail/head_projections.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/opt/rope.hpp"
#include "tvlab/ref/gqa_attention.hpp"

namespace tvlab::opt {
namespace {

// Attention of checked q, k, v: chapter 00's version 2, whose query head t reads kv head t / (h/g).
Tensor3 grouped_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionConfig& cfg,
                          double scale) {
  return detail::attention_by_heads(q, k, v, cfg, static_cast<float>(scale),
                                    detail::attention_head_threads(q.shape()[0]), nullptr);
}

}  // namespace

Tensor3 grouped_scaled_dot_product_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                             const AttentionConfig& cfg) {
  const char* fn = "grouped_scaled_dot_product_attention";
  const double scale = ref::validate_grouped_attention(fn, q, k, v, k.shape()[1], cfg.scale, cfg.mask);
  require_supported(fn, cfg.mask, kGroupedAttentionMaskSupport);
  return grouped_attention(q, k, v, cfg, scale);
}

Tensor2 grouped_query_attention(const Tensor2& x_q, const Tensor2& x_kv, const GqaWeights& w, const KvHeads& heads,
                                const AttentionConfig& cfg, const std::optional<AttentionRope>& rope) {
  const char* fn = "grouped_query_attention";
  const GqaShape shape = ref::validate_grouped_query_attention(fn, x_q, x_kv, w, heads, cfg, rope);
  require_supported(fn, cfg.mask, kGroupedAttentionMaskSupport);
  const std::size_t h = static_cast<std::size_t>(heads.num_heads), g = static_cast<std::size_t>(heads.num_kv_heads);

  std::uint64_t macs = 0;  // not reported here, as in the reference
  // Three SGEMMs: h query heads from X_q, only g key and g value heads from X_kv.
  Tensor3 q = detail::project_to_heads(x_q, 0, w.w_q, h, shape.head_dim, macs);
  Tensor3 k = detail::project_to_heads(x_kv, 0, w.w_k, g, shape.head_dim, macs);
  const Tensor3 v = detail::project_to_heads(x_kv, 0, w.w_v, g, shape.head_dim, macs);
  if (rope) {
    // q'_i = R(p0 + n_k - n_q + i) q_i, k'_j = R(p0 + j) k_j: the g kv heads are rotated once
    // each, not once per query head that reads them.
    const auto query_shift = static_cast<long long>(x_kv.shape()[0] - x_q.shape()[0]);
    q = apply_rope(q, rope->freqs, rope->layout, rope->first_position + query_shift);
    k = apply_rope(k, rope->freqs, rope->layout, rope->first_position);
  }
  // A finite x can still project beyond float's range: the projected heads are checked as the
  // reference checks them.
  const double scale = ref::validate_grouped_attention(fn, q, k, v, k.shape()[1], cfg.scale, cfg.mask);
  return detail::project_from_heads(grouped_attention(q, k, v, cfg, scale), w.w_o, macs);
}

}  // namespace tvlab::opt
