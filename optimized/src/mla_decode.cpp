#include "tvlab/opt/mla_decode.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"

#include "detail/blas.hpp"
#include "detail/flash_tiles.hpp"
#include "detail/split_decode.hpp"

namespace tvlab::opt {
namespace {

constexpr const char* kFunction = "mla_absorbed_decode_attention";
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Cached positions per tile: a tile of [c^KV; k^R] rows (128 x 576 floats, 288 KiB at DeepSeek's
// widths) stays in L2 between the score product that reads it and the P~ C product that reads it
// again, beside one thread's accumulator O~ (128 x 512 floats, 256 KiB) and scores (64 KiB). Measured
// on a 2-core AMD EPYC (1 MiB L2 per core) at 32K positions: 64 positions per tile ~15% slower than
// 128, 256 no faster (the P~ C product gains from a longer inner dimension).
constexpr std::size_t kTilePositions = 128;

std::size_t round_up(std::size_t x, std::size_t multiple) { return (x + multiple - 1) / multiple * multiple; }

// The widths every version works with, read off the arguments once they are validated.
struct DecodeDims {
  std::size_t heads, d_c, d_r, width;
  DecodeDims(const Tensor2& q_absorbed, const Tensor2& latents, const Tensor2& rope_keys)
      : heads(q_absorbed.shape()[0]), d_c(latents.shape()[1]), d_r(rope_keys.shape()[1]), width(d_c + d_r) {}
};

// The largest |value| of cached positions [begin, end), or +inf when one is not finite: one
// vectorised pass over the contiguous rows (max_abs_or_inf).
float cached_max_abs(const Tensor2& latents, const Tensor2& rope_keys, std::size_t begin, std::size_t end) {
  const std::size_t d_c = latents.shape()[1], d_r = rope_keys.shape()[1];
  return std::max(max_abs_or_inf(latents.data() + begin * d_c, (end - begin) * d_c),
                  max_abs_or_inf(rope_keys.data() + begin * d_r, (end - begin) * d_r));
}

// The reference's checks on the cache, from the largest |value| the kernel saw: every cached value
// finite and scale (d_c + d_h^R) max|q^| max|k| <= 1e38, so that no score overflows in float. (A
// score that overflowed could not be told from the result: an infinite partial sum absorbs the
// terms after it, and a -inf score gets weight 0 silently.) On failure the reference's check scans
// the cache again, for its error naming the parameter and the position.
void require_cache_in_range(const Tensor2& latents, const Tensor2& rope_keys, std::size_t length, double q_max,
                            double key_max, double scale) {
  const double dot_bound = static_cast<double>(latents.shape()[1] + rope_keys.shape()[1]) * q_max * key_max;
  if (std::isfinite(key_max) && dot_bound <= 1e38 && scale * dot_bound <= 1e38) return;
  ref::check_mla_decode_cache(kFunction, latents, rope_keys, length, q_max, scale);
  fail(kFunction, "the cache is out of range");  // (check_mla_decode_cache has thrown)
}

// Each version ends here. With the inputs checked, a non-finite output can only come from the
// weighted sum of latents overflowing (max|c| times length beyond float's range).
void require_finite_result(const MlaDecodeAttention& result) {
  const bool finite = std::isfinite(max_abs_or_inf(result.out_latent.data(), result.out_latent.size())) &&
                      std::isfinite(max_abs_or_inf(result.lse.data(), result.lse.size()));
  require(finite, kFunction, "the weighted sum of the latents left float's range (max|latent| x length > 3.4e38)");
}

}  // namespace

// ---------------------------------------------------------------------------------------- v1

MlaDecodeAttention mla_absorbed_decode_attention_v1(const Tensor2& q_absorbed, const Tensor2& latents,
                                                    const Tensor2& rope_keys, std::size_t length, double scale) {
  const double q_max = ref::validate_mla_decode_attention(kFunction, q_absorbed, latents, rope_keys, length, scale);
  const DecodeDims dims(q_absorbed, latents, rope_keys);
  const auto& [heads, d_c, d_r, width] = dims;
  // One extra pass over the cache for its checks: v1 reads it once per head anyway.
  require_cache_in_range(latents, rope_keys, length, q_max, cached_max_abs(latents, rope_keys, 0, length), scale);
  const auto scale_f = static_cast<float>(scale);
  // The score tile padded to whole SIMD batches, the padding -inf (weight 0).
  const std::size_t tile_pad = round_up(kTilePositions, detail::kLanes);

  MlaDecodeAttention result{Tensor2::from_shape({heads, d_c}), Tensor1::from_shape({heads})};
#pragma omp parallel
  {
    std::vector<float> s(tile_pad), o(d_c);  // this thread's score tile and accumulator O~_i
#pragma omp for schedule(dynamic)
    for (std::ptrdiff_t head = 0; head < static_cast<std::ptrdiff_t>(heads); ++head) {
      const auto i = static_cast<std::size_t>(head);
      const float* q_latent = q_absorbed.data() + i * width;  // q~_i
      const float* q_rope = q_latent + d_c;                   // q^R_i
      float m = kNegInf, l = 0.0f;
      std::fill(o.begin(), o.end(), 0.0f);
      // Head i alone streams every cached position: the cache is read once per head.
      for (std::size_t j0 = 0; j0 < length; j0 += kTilePositions) {
        const std::size_t cols = std::min(kTilePositions, length - j0);
        // s_j = scale (q~_i . c^KV_j + q^R_i . k^R_j)
        for (std::size_t c = 0; c < cols; ++c) {
          const float* latent = latents.data() + (j0 + c) * d_c;
          const float* rope_key = rope_keys.data() + (j0 + c) * d_r;
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (std::size_t e = 0; e < d_c; ++e) dot += q_latent[e] * latent[e];
#pragma omp simd reduction(+ : dot)
          for (std::size_t e = 0; e < d_r; ++e) dot += q_rope[e] * rope_key[e];
          s[c] = scale_f * dot;
        }
        std::fill(s.begin() + static_cast<std::ptrdiff_t>(cols), s.end(), kNegInf);
        // m' = max(m, max_j s_j); p~_j = e^{s_j - m'}; l' = e^{m - m'} l + sum_j p~_j; O~ *= e^{m - m'}
        detail::online_softmax_row(s.data(), tile_pad, m, l, o.data(), d_c);
        // O~_i += sum_j p~_j c^KV_j, one contiguous axpy per cached position
        for (std::size_t c = 0; c < cols; ++c) {
          const float p = s[c];
          const float* latent = latents.data() + (j0 + c) * d_c;
#pragma omp simd
          for (std::size_t e = 0; e < d_c; ++e) o[e] += p * latent[e];
        }
      }
      // a_i = O~_i / l, L_i = m + ln l (l >= 1: the maximum's own term is e^0)
      const float inv_l = 1.0f / l;
      for (std::size_t e = 0; e < d_c; ++e) result.out_latent(i, e) = o[e] * inv_l;
      result.lse(i) = m + std::log(l);
    }
  }
  require_finite_result(result);
  return result;
}

// ---------------------------------------------------------------------------------------- v2

MlaDecodeAttention mla_absorbed_decode_attention_split_k(const Tensor2& q_absorbed, const Tensor2& latents,
                                                         const Tensor2& rope_keys, std::size_t length, double scale,
                                                         std::size_t splits) {
  const double q_max = ref::validate_mla_decode_attention(kFunction, q_absorbed, latents, rope_keys, length, scale);
  require(splits >= 1, kFunction, "splits (", splits, ") must be at least 1");
  splits = std::min(splits, length);
  const DecodeDims dims(q_absorbed, latents, rope_keys);
  const auto& [heads, d_c, d_r, width] = dims;
  const auto scale_f = static_cast<float>(scale);
  const std::size_t tile_pad = round_up(kTilePositions, detail::kLanes);

  // The partial state of every split and head: m, l, and O~ [heads, d_c].
  std::vector<float> part_o(splits * heads * d_c, 0.0f), part_m(splits * heads, kNegInf), part_l(splits * heads, 0.0f);
  std::vector<float> part_key_max(splits, 0.0f);  // the largest |value| each split read (checked after)
  {
    // The splits are the parallelism: each SGEMM runs on its caller's thread.
    const detail::SingleThreadedBlas single_threaded_blas;
#pragma omp parallel
    {
      std::vector<float> scores(heads * tile_pad);  // S, then P~, of one tile: [heads, tile_pad]
#pragma omp for schedule(dynamic)
      for (std::ptrdiff_t split = 0; split < static_cast<std::ptrdiff_t>(splits); ++split) {
        const auto r = static_cast<std::size_t>(split);
        // Split r: positions [r length / splits, (r + 1) length / splits), as even as integers allow.
        const std::size_t begin = r * length / splits, end = (r + 1) * length / splits;
        float* o = part_o.data() + r * heads * d_c;
        float* m = part_m.data() + r * heads;
        float* l = part_l.data() + r * heads;
        for (std::size_t j0 = begin; j0 < end; j0 += kTilePositions) {
          const std::size_t cols = std::min(kTilePositions, end - j0);
          const float* latent_tile = latents.data() + j0 * d_c;    // C_KV rows j0 .. j0 + cols
          const float* rope_tile = rope_keys.data() + j0 * d_r;    // K^R rows
          // The tile's first read from memory, for the checks; the products below find it in cache.
          part_key_max[r] = std::max(part_key_max[r], cached_max_abs(latents, rope_keys, j0, j0 + cols));
          // S = scale Q~ C_KV^T + scale Q^R K^R^T: [q~; q^R] . [c; k^R] as two products, since the
          // cache keeps the latents and the RoPE keys apart. Every head is a row: one read of the tile.
          detail::sgemm(heads, cols, d_c, scale_f, q_absorbed.data(), width, latent_tile, d_c, true, 0.0f,
                        scores.data(), tile_pad);
          detail::sgemm(heads, cols, d_r, scale_f, q_absorbed.data() + d_c, width, rope_tile, d_r, true, 1.0f,
                        scores.data(), tile_pad);
          // Per head: m' = max(m, rowmax S); P~ = e^{S - m'}; l' = e^{m - m'} l + rowsum P~; O~ row *= e^{m - m'}
          for (std::size_t i = 0; i < heads; ++i) {
            float* row = scores.data() + i * tile_pad;
            std::fill(row + cols, row + tile_pad, kNegInf);
            detail::online_softmax_row(row, tile_pad, m[i], l[i], o + i * d_c, d_c);
          }
          // O~ += P~ C_KV: [heads, cols] x [cols, d_c], the tile read again, now from cache
          detail::sgemm(heads, d_c, cols, 1.0f, scores.data(), tile_pad, latent_tile, d_c, false, 1.0f, o, d_c);
        }
      }
    }
  }

  // The checks on what the tiles held, once all were read (a bad cache throws before the merge).
  require_cache_in_range(latents, rope_keys, length, q_max,
                         *std::max_element(part_key_max.begin(), part_key_max.end()), scale);

  // Merge the splits per head (chapter 04's merge of two softmax states, over all the splits).
  MlaDecodeAttention result{Tensor2::from_shape({heads, d_c}), Tensor1::from_shape({heads})};
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t head = 0; head < static_cast<std::ptrdiff_t>(heads); ++head) {
    const auto i = static_cast<std::size_t>(head);
    detail::merge_split_states(i, splits, heads, part_m.data(), part_l.data(), part_o.data(), d_c,
                               d_c, result.out_latent.data() + i * d_c, result.lse(i));
  }
  require_finite_result(result);
  return result;
}

MlaDecodeAttention mla_absorbed_decode_attention_v2(const Tensor2& q_absorbed, const Tensor2& latents,
                                                    const Tensor2& rope_keys, std::size_t length, double scale) {
  // One range per thread, but none shorter than a tile (a short cache is one range).
  const std::size_t tiles = (length + kTilePositions - 1) / kTilePositions;
  const std::size_t splits = std::clamp<std::size_t>(tiles, 1, static_cast<std::size_t>(omp_get_max_threads()));
  return mla_absorbed_decode_attention_split_k(q_absorbed, latents, rope_keys, length, scale, splits);
}

const std::vector<MlaDecodeVariant>& mla_decode_variants() {
  static const std::vector<MlaDecodeVariant> variants = {
      {"v1", "one head at a time: SIMD dot products and axpys over the cache, which every head reads again",
       mla_absorbed_decode_attention_v1},
      {"v2", "the heads as the rows of SGEMMs against each tile of the shared cache, read once per step; "
             "positions split across threads, partial softmax states merged",
       mla_absorbed_decode_attention_v2},
  };
  return variants;
}

MlaDecodeAttention mla_absorbed_decode_attention(const Tensor2& q_absorbed, const Tensor2& latents,
                                                 const Tensor2& rope_keys, std::size_t length, double scale) {
  return mla_decode_variants().back().function(q_absorbed, latents, rope_keys, length, scale);
}

}  // namespace tvlab::opt
