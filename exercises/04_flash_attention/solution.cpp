// Chapter 04 exercises: worked solutions. Each marked region is what a student writes;
// scripts/make_student.py turns this file into student.cpp with the regions replaced by
// NotImplemented stubs. Edit this file, then regenerate (`make student-stubs`).

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/student/flash_attention.hpp"
#include "tvlab/student/io_model.hpp"
#include "tvlab/student/online_softmax.hpp"

namespace tvlab::student {

SoftmaxState online_softmax_merge(SoftmaxState a, SoftmaxState b) {
  // BEGIN EXERCISE 04.1 "merge two online-softmax states" "The online softmax"
  const double m = std::max(a.max, b.max);
  if (m == -std::numeric_limits<double>::infinity()) return {};  // nothing seen on either side
  // Each sum was taken relative to its own maximum: move both to m.
  auto moved = [m](const SoftmaxState& s) { return s.sum == 0.0 ? 0.0 : s.sum * std::exp(s.max - m); };
  return {m, moved(a) + moved(b)};
  // END EXERCISE
}

FlashOutput flash_attention_forward(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg) {
  // BEGIN EXERCISE 04.2 "flash attention's tiled forward pass" "Flash attention, forward"
  const double scale = validate_flash("flash_attention_forward", q, k, v, cfg);
  require_fp32_flash("flash_attention_forward", cfg);  // no fp8 or 16-bit emulation here
  require_supported("flash_attention_forward", cfg.mask, kFlashMaskSupport);  // causal only
  const std::size_t heads = q.shape()[0], nq = q.shape()[1], d = q.shape()[2], nk = k.shape()[1], dv = v.shape()[2];
  const std::size_t shift = nk - nq;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  FlashOutput result{Tensor3::from_shape({heads, nq, dv}), Tensor2::from_shape({heads, nq}), 0, 0};
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t r0 = 0; r0 < nq; r0 += cfg.block_q) {
      const std::size_t r1 = std::min(nq, r0 + cfg.block_q);
      std::vector<double> m(r1 - r0, neg_inf), l(r1 - r0, 0.0), o((r1 - r0) * dv, 0.0);
      for (std::size_t c0 = 0; c0 < nk; c0 += cfg.block_k) {
        if (cfg.mask.causal && c0 > r1 - 1 + shift) {  // this tile and all later ones are hidden
          result.tiles_skipped += (nk - c0 + cfg.block_k - 1) / cfg.block_k;
          break;
        }
        ++result.tiles_computed;
        const std::size_t c1 = std::min(nk, c0 + cfg.block_k);
        for (std::size_t i = r0; i < r1; ++i) {
          const std::size_t r = i - r0;
          std::vector<double> s;
          double tile_max = neg_inf;
          for (std::size_t j = c0; j < c1; ++j) {
            double dot = 0;
            if (!(cfg.mask.causal && j > i + shift))
              for (std::size_t e = 0; e < d; ++e) dot += static_cast<double>(q(h, i, e)) * k(h, j, e);
            s.push_back(cfg.mask.causal && j > i + shift ? neg_inf : scale * dot);
            tile_max = std::max(tile_max, s.back());
          }
          const double m_new = std::max(m[r], tile_max);
          if (m_new == neg_inf) continue;
          const double factor = m[r] == neg_inf ? 0.0 : std::exp(m[r] - m_new);
          l[r] *= factor;
          for (std::size_t e = 0; e < dv; ++e) o[r * dv + e] *= factor;
          for (std::size_t j = c0; j < c1; ++j) {
            const double p = std::exp(s[j - c0] - m_new);
            l[r] += p;
            for (std::size_t e = 0; e < dv; ++e) o[r * dv + e] += p * v(h, j, e);
          }
          m[r] = m_new;
        }
      }
      for (std::size_t i = r0; i < r1; ++i) {
        const std::size_t r = i - r0;
        for (std::size_t e = 0; e < dv; ++e) result.out(h, i, e) = l[r] > 0 ? static_cast<float>(o[r * dv + e] / l[r]) : 0.0f;
        result.lse(h, i) = l[r] > 0 ? static_cast<float>(m[r] + std::log(l[r])) : -std::numeric_limits<float>::infinity();
      }
    }
  return result;
  // END EXERCISE
}

analysis::FlashTiles best_flash_tiles(std::size_t n, std::size_t d, std::size_t sram_floats) {
  // BEGIN EXERCISE 04.3 "the tile sizes that move the fewest elements" "The IO model"
  require(n > 0 && d > 0, "best_flash_tiles", "n and d must be positive");
  require(analysis::flash_tile_floats(d, 1, 1) <= sram_floats, "best_flash_tiles", "sram_floats (", sram_floats,
          ") is too small for even 1 x 1 tiles");
  // Traffic = 2nd + T_c (3nd + 4n) with T_c = ceil(n / B_c): only the number of key tiles counts.
  std::size_t block_c = 1;
  while (block_c < n && analysis::flash_tile_floats(d, 1, block_c + 1) <= sram_floats) ++block_c;
  const std::size_t key_tiles = (n + block_c - 1) / block_c;
  block_c = (n + key_tiles - 1) / key_tiles;  // the smallest B_c with that many tiles leaves most room
  std::size_t block_r = 1;
  while (block_r < n && analysis::flash_tile_floats(d, block_r + 1, block_c) <= sram_floats) ++block_r;
  return {block_r, block_c, analysis::flash_attention_io(n, d, block_r, block_c)};
  // END EXERCISE
}

}  // namespace tvlab::student
