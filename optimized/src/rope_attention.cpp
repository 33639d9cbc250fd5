#include "tvlab/opt/rope_attention.hpp"

#include <algorithm>
#include <vector>

#include "detail/attention_heads.hpp"
#include "detail/rope_row.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/opt/attention.hpp"
#include "tvlab/opt/rope.hpp"

namespace tvlab::opt {
namespace {

constexpr const char* kFunction = "rope_attention";

// The checks of ref::rope_attention; returns the score scale.
double validate(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionRope& rope,
                const AttentionConfig& cfg) {
  const double growth = validate_attention_rope(kFunction, rope, q.shape()[1], k.shape()[1], q.shape()[2]);
  const double scale = validate_attention(kFunction, q, k, v, cfg, growth);
  require_supported(kFunction, cfg.mask, kAttentionMaskSupport);
  return scale;
}

}  // namespace

Tensor3 rope_attention_v1(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionRope& rope,
                          const AttentionConfig& cfg) {
  validate(q, k, v, rope, cfg);
  // A pass of its own over q and over k: query i at p0 + seq_k - seq_q + i, key j at p0 + j.
  const long long p0 = rope.first_position, query_shift = static_cast<long long>(k.shape()[1] - q.shape()[1]);
  return scaled_dot_product_attention_v1(apply_rope(q, rope.freqs, rope.layout, p0 + query_shift),
                                         apply_rope(k, rope.freqs, rope.layout, p0), v, cfg);
}

Tensor3 rope_attention_v2(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionRope& rope,
                          const AttentionConfig& cfg) {
  const auto scale = static_cast<float>(validate(q, k, v, rope, cfg));
  const std::size_t seq_q = q.shape()[1], seq_k = k.shape()[1], head_dim = q.shape()[2];
  const int threads = detail::attention_head_threads(q.shape()[0]);
  // RoPE fused into the load: each thread rotates its head's q and k while copying them into
  // private buffers (one read of q and k, no rotated copy of the whole tensors); the cos/sin cache
  // covers the key positions p0 .. p0 + seq_k - 1, and query i uses row seq_k - seq_q + i.
  const RopeCache cache = make_rope_cache(rope.freqs, rope.first_position, static_cast<long long>(seq_k));
  const std::size_t q_size = seq_q * head_dim, k_size = seq_k * head_dim;
  std::vector<float> rotated(static_cast<std::size_t>(threads) * (q_size + k_size));
  // With partial rotation (cache.pairs < head_dim / 2) the coordinates past 2 * pairs are copied as they are.
  const std::size_t rotated_dims = 2 * cache.pairs;
  auto rotate_head = [&](const float* src, float* dst, std::size_t rows, std::size_t first_cache_row) {
    for (std::size_t t = 0; t < rows; ++t) {
      const std::size_t c = (first_cache_row + t) * cache.pairs;
      (void)detail::rotate_row(src + t * head_dim, dst + t * head_dim, cache.cos.data() + c, cache.sin.data() + c,
                               cache.pairs, rope.layout);  // inputs already checked
      std::copy(src + t * head_dim + rotated_dims, src + (t + 1) * head_dim, dst + t * head_dim + rotated_dims);
    }
  };
  return detail::attention_by_heads(
      q, k, v, cfg, scale, threads, [&](std::size_t, std::size_t thread, const float*& qh, const float*& kh) {
        float* q_buffer = rotated.data() + thread * (q_size + k_size);
        float* k_buffer = q_buffer + q_size;
        rotate_head(qh, q_buffer, seq_q, seq_k - seq_q);
        rotate_head(kh, k_buffer, seq_k, 0);
        qh = q_buffer;
        kh = k_buffer;
      });
}

const std::vector<RopeAttentionVariant>& rope_attention_variants() {
  static const std::vector<RopeAttentionVariant> variants = {
      {"v1", "q and k rotated in passes of their own, then attention v1", rope_attention_v1},
      {"v2", "RoPE fused into attention v2's per-head copies of q and k", rope_attention_v2},
  };
  return variants;
}

Tensor3 rope_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionRope& rope,
                       const AttentionConfig& cfg) {
  return rope_attention_variants().back().function(q, k, v, rope, cfg);
}

}  // namespace tvlab::opt
