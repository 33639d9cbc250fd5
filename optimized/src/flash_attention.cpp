#include "tvlab/opt/flash_attention.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace tvlab::opt {

// ---------------------------------------------------------------------------------------- v1

FlashOutput flash_attention_forward_v1(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg) {
  const auto scale = static_cast<float>(validate_flash("flash_attention_forward", q, k, v, cfg));
  const std::size_t heads = q.shape()[0], seq_q = q.shape()[1], d = q.shape()[2];
  const std::size_t seq_k = k.shape()[1], d_v = v.shape()[2];
  const std::size_t shift = seq_k - seq_q;  // causal: query i sees keys j <= i + shift
  const std::size_t br = std::min(cfg.block_q, seq_q), bc = std::min(cfg.block_k, seq_k);
  const std::size_t q_tiles = (seq_q + br - 1) / br, k_tiles = (seq_k + bc - 1) / bc;
  constexpr float neg_inf = -std::numeric_limits<float>::infinity();

  FlashOutput result{Tensor3::from_shape({heads, seq_q, d_v}), Tensor2::from_shape({heads, seq_q}), 0, 0};
  // Per-thread on-chip state: the score tile [br, bc], and per row m, l and the accumulator O~.
  const int threads = omp_get_max_threads();
  const std::size_t per_thread = br * bc + br * (d_v + 2);
  std::vector<float> scratch(static_cast<std::size_t>(threads) * per_thread);
  const auto tasks = static_cast<std::ptrdiff_t>(heads * q_tiles);
  std::size_t computed = 0, skipped = 0;

#pragma omp parallel for schedule(dynamic) num_threads(threads) reduction(+ : computed, skipped)
  for (std::ptrdiff_t task = 0; task < tasks; ++task) {
    const std::size_t h = static_cast<std::size_t>(task) / q_tiles, r0 = (static_cast<std::size_t>(task) % q_tiles) * br;
    const std::size_t rows = std::min(br, seq_q - r0);
    float* s = scratch.data() + static_cast<std::size_t>(omp_get_thread_num()) * per_thread;
    float* m = s + br * bc;
    float* l = m + br;
    float* o = l + br;
    std::fill(m, m + rows, neg_inf);
    std::fill(l, l + rows, 0.0f);
    std::fill(o, o + rows * d_v, 0.0f);
    const float* qh = q.data() + h * seq_q * d;
    const float* kh = k.data() + h * seq_k * d;
    const float* vh = v.data() + h * seq_k * d_v;

    for (std::size_t c0 = 0; c0 < seq_k; c0 += bc) {
      const std::size_t cols = std::min(bc, seq_k - c0);
      if (cfg.causal && c0 > r0 + rows - 1 + shift) {  // every later key tile is hidden too
        skipped += k_tiles - c0 / bc;
        break;
      }
      ++computed;
      for (std::size_t r = 0; r < rows; ++r) {
        const std::size_t i = r0 + r;
        const float* qi = qh + i * d;
        float* srow = s + r * bc;
        // S_rc = scale q_i . k_c for the keys the causal mask allows; the others count as -inf.
        const std::size_t visible = cfg.causal ? std::min(cols, i + shift + 1 > c0 ? i + shift + 1 - c0 : 0) : cols;
        float tile_max = neg_inf;
        for (std::size_t c = 0; c < visible; ++c) {
          const float* kc = kh + (c0 + c) * d;
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (std::size_t e = 0; e < d; ++e) dot += qi[e] * kc[e];
          srow[c] = scale * dot;
          tile_max = std::max(tile_max, srow[c]);
        }
        if (visible == 0) continue;
        // m' = max(m, rowmax S); l and O~ rescaled by e^{m - m'} (0 on the first visible tile).
        const float m_new = std::max(m[r], tile_max);
        const float correction = m[r] == neg_inf ? 0.0f : std::exp(m[r] - m_new);
        float* orow = o + r * d_v;
        float sum = l[r] * correction;
#pragma omp simd
        for (std::size_t e = 0; e < d_v; ++e) orow[e] *= correction;
        // P~ = e^{S - m'}; l' += rowsum P~; O~' += P~ V_j, one contiguous axpy per key.
        for (std::size_t c = 0; c < visible; ++c) {
          const float p = std::exp(srow[c] - m_new);
          sum += p;
          const float* vc = vh + (c0 + c) * d_v;
#pragma omp simd
          for (std::size_t e = 0; e < d_v; ++e) orow[e] += p * vc[e];
        }
        l[r] = sum;
        m[r] = m_new;
      }
    }
    // O = O~ / l, L = m + ln l; a row that saw no key gets O = 0, L = -inf.
    for (std::size_t r = 0; r < rows; ++r) {
      float* out = result.out.data() + (h * seq_q + r0 + r) * d_v;
      const bool seen = l[r] > 0.0f;
      const float inv_l = seen ? 1.0f / l[r] : 0.0f;
#pragma omp simd
      for (std::size_t e = 0; e < d_v; ++e) out[e] = o[r * d_v + e] * inv_l;
      result.lse(h, r0 + r) = seen ? m[r] + std::log(l[r]) : neg_inf;
    }
  }
  result.tiles_computed = computed;
  result.tiles_skipped = skipped;
  return result;
}

const std::vector<FlashVariant>& flash_variants() {
  static const std::vector<FlashVariant> variants = {
      {"v1", "the tiled loops in float: threads over (head, query tile), contiguous SIMD dot products and axpys",
       flash_attention_forward_v1},
  };
  return variants;
}

FlashOutput flash_attention_forward(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg) {
  return flash_variants().back().function(q, k, v, cfg);
}

}  // namespace tvlab::opt
