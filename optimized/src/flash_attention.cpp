#include "tvlab/opt/flash_attention.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numbers>
#include <numeric>
#include <vector>

#include "tvlab/core/error.hpp"

#include "detail/flash_tiles.hpp"

namespace tvlab::opt {
namespace {

// The sizes every version works with: the shapes, and tiles clamped to the sequences with their
// counts.
struct FlashDims {
  std::size_t heads, seq_q, d, seq_k, d_v, br, bc, q_tiles, k_tiles;
  FlashDims(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg)
      : heads(q.shape()[0]), seq_q(q.shape()[1]), d(q.shape()[2]), seq_k(k.shape()[1]), d_v(v.shape()[2]),
        br(std::min(cfg.block_q, seq_q)), bc(std::min(cfg.block_k, seq_k)), q_tiles((seq_q + br - 1) / br),
        k_tiles((seq_k + bc - 1) / bc) {}
};

// The key tiles [first, end) that overlap the keys of query rows [r0, r0 + rows) (the causal rule
// and the window leave each row a contiguous range, `AttentionMask::key_range`): every other key
// tile is hidden from the whole query tile and is skipped.
struct TileSpan {
  std::size_t first, end;
};
TileSpan key_tiles_of(const AttentionMask& mask, const FlashDims& dims, std::size_t r0, std::size_t rows) {
  const IndexRange keys = mask.key_range_of_rows(r0, r0 + rows, dims.seq_q, dims.seq_k);
  if (keys.empty()) return {0, 0};
  return {keys.begin / dims.bc, (keys.end + dims.bc - 1) / dims.bc};
}

// The columns [begin, end) of the key tile [c0, c0 + cols) that query i may see.
IndexRange visible_columns(const AttentionMask& mask, const FlashDims& dims, std::size_t i, std::size_t c0,
                           std::size_t cols) {
  const IndexRange keys = mask.key_range(i, dims.seq_q, dims.seq_k);
  const std::size_t begin = std::clamp(keys.begin, c0, c0 + cols), end = std::clamp(keys.end, begin, c0 + cols);
  return {begin - c0, end - c0};
}

std::size_t round_up(std::size_t x, std::size_t multiple) { return (x + multiple - 1) / multiple * multiple; }

// 32 KiB of floats, half of a 48 KiB L1 data cache: the size v3 and the backward v4 give the
// operand a micro-kernel streams, so that it stays in L1 for every block of rows that uses it.
constexpr std::size_t kHalfL1Floats = 8192;

// A float buffer left unwritten (std::vector would zero it, one thread touching every page while
// the others wait): the parallel loops that fill it write every element that is read, so its
// pages are first touched, and zeroed by the system, in parallel.
std::unique_ptr<float[]> unfilled_floats(std::size_t n) { return std::unique_ptr<float[]>(new float[n]); }

// The rows of a [heads, n, width] tensor as the accumulation kernels read them, `width_pad`
// floats apart (width rounded up to whole micro-kernel blocks): the tensor itself when its rows
// are already whole blocks (d = 64, 128, ...), else a copy with zeros in the padding.
class PaddedRows {
 public:
  PaddedRows(const Tensor3& t, std::size_t width_pad) : data_(t.data()) {
    const std::size_t width = t.shape()[2], rows = t.shape()[0] * t.shape()[1];
    if (width == width_pad) return;
    copy_.assign(rows * width_pad, 0.0f);
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t r = 0; r < static_cast<std::ptrdiff_t>(rows); ++r) {
      const float* row = t.data() + static_cast<std::size_t>(r) * width;
      std::copy(row, row + width, copy_.data() + static_cast<std::size_t>(r) * width_pad);
    }
    data_ = copy_.data();
  }
  PaddedRows(const PaddedRows&) = delete;  // data_ may point into copy_
  PaddedRows& operator=(const PaddedRows&) = delete;
  const float* data() const { return data_; }

 private:
  std::vector<float> copy_;
  const float* data_;
};

}  // namespace

// ---------------------------------------------------------------------------------------- v1

FlashOutput flash_attention_forward_v1(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg) {
  const auto scale = static_cast<float>(validate_flash("flash_attention_forward", q, k, v, cfg));
  require_fp32_flash("flash_attention_forward", cfg);
  require_supported("flash_attention_forward", cfg.mask, kFlashMaskSupport);
  const FlashDims dims(q, k, v, cfg);
  const auto& [heads, seq_q, d, seq_k, d_v, br, bc, q_tiles, k_tiles] = dims;
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

    // Only the key tiles the causal rule and the window leave to some row of this query tile.
    const TileSpan span = key_tiles_of(cfg.mask, dims, r0, rows);
    skipped += k_tiles - (span.end - span.first);
    for (std::size_t c0 = span.first * bc; c0 < span.end * bc; c0 += bc) {
      const std::size_t cols = std::min(bc, seq_k - c0);
      ++computed;
      for (std::size_t r = 0; r < rows; ++r) {
        const std::size_t i = r0 + r;
        const float* qi = qh + i * d;
        float* srow = s + r * bc;
        // S_rc = scale q_i . k_c for the columns the mask leaves to row i; the others count as -inf.
        const IndexRange visible = visible_columns(cfg.mask, dims, i, c0, cols);
        float tile_max = neg_inf;
        for (std::size_t c = visible.begin; c < visible.end; ++c) {
          const float* kc = kh + (c0 + c) * d;
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (std::size_t e = 0; e < d; ++e) dot += qi[e] * kc[e];
          srow[c] = scale * dot;
          tile_max = std::max(tile_max, srow[c]);
        }
        if (visible.empty()) continue;
        // m' = max(m, rowmax S); l and O~ rescaled by e^{m - m'} (0 on the first visible tile).
        const float m_new = std::max(m[r], tile_max);
        const float correction = m[r] == neg_inf ? 0.0f : std::exp(m[r] - m_new);
        float* orow = o + r * d_v;
        float sum = l[r] * correction;
#pragma omp simd
        for (std::size_t e = 0; e < d_v; ++e) orow[e] *= correction;
        // P~ = e^{S - m'}; l' += rowsum P~; O~' += P~ V_j, one contiguous axpy per key.
        for (std::size_t c = visible.begin; c < visible.end; ++c) {
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

// ---------------------------------------------------------------------------------------- v2

FlashOutput flash_attention_forward_v2(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg) {
  using detail::FloatBatch;
  using detail::kLanes;
  const auto scale = static_cast<float>(validate_flash("flash_attention_forward", q, k, v, cfg));
  require_fp32_flash("flash_attention_forward", cfg);
  require_supported("flash_attention_forward", cfg.mask, kFlashMaskSupport);
  const FlashDims dims(q, k, v, cfg);
  const auto& [heads, seq_q, d, seq_k, d_v, br, bc, q_tiles, k_tiles] = dims;
  // Tile widths padded to whole micro-kernel blocks; the padding is zeros in K^T and V.
  const std::size_t bc_pad = round_up(bc, detail::kTileCols), dv_pad = round_up(d_v, detail::kTileCols);
  constexpr float neg_inf = -std::numeric_limits<float>::infinity();

  // Pack every key tile once, shared by all query tiles of its head: K_j transposed to
  // [d, bc_pad] (the score micro-kernel then loads contiguous keys) and V_j to [bc, dv_pad].
  // About the size of K and V (more when block_k is much smaller than a micro-kernel block, whose
  // width every tile is padded to): no [seq_q, seq_k] buffer.
  const std::size_t kt_tile = d * bc_pad, v_tile = bc * dv_pad;
  std::vector<float> kt(heads * k_tiles * kt_tile, 0.0f), vp(heads * k_tiles * v_tile, 0.0f);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t t = 0; t < static_cast<std::ptrdiff_t>(heads * k_tiles); ++t) {
    const std::size_t h = static_cast<std::size_t>(t) / k_tiles, c0 = (static_cast<std::size_t>(t) % k_tiles) * bc;
    const std::size_t cols = std::min(bc, seq_k - c0);
    float* ktile = kt.data() + static_cast<std::size_t>(t) * kt_tile;
    float* vtile = vp.data() + static_cast<std::size_t>(t) * v_tile;
    for (std::size_t c = 0; c < cols; ++c) {
      const float* krow = k.data() + (h * seq_k + c0 + c) * d;
      for (std::size_t e = 0; e < d; ++e) ktile[e * bc_pad + c] = krow[e];
      const float* vrow = v.data() + (h * seq_k + c0 + c) * d_v;
      std::copy(vrow, vrow + d_v, vtile + c * dv_pad);
    }
  }

  FlashOutput result{Tensor3::from_shape({heads, seq_q, d_v}), Tensor2::from_shape({heads, seq_q}), 0, 0};
  const int threads = omp_get_max_threads();
  // Per thread: the score tile [br, bc_pad], the accumulator O~ [br, dv_pad], and m, l per row.
  const std::size_t per_thread = br * bc_pad + br * dv_pad + 2 * br;
  std::vector<float> scratch(static_cast<std::size_t>(threads) * per_thread);
  std::size_t computed = 0, skipped = 0;

#pragma omp parallel for schedule(dynamic) num_threads(threads) reduction(+ : computed, skipped)
  for (std::ptrdiff_t task = 0; task < static_cast<std::ptrdiff_t>(heads * q_tiles); ++task) {
    const std::size_t h = static_cast<std::size_t>(task) / q_tiles, r0 = (static_cast<std::size_t>(task) % q_tiles) * br;
    const std::size_t rows = std::min(br, seq_q - r0);
    float* s = scratch.data() + static_cast<std::size_t>(omp_get_thread_num()) * per_thread;
    float* o = s + br * bc_pad;
    float* m = o + br * dv_pad;
    float* l = m + br;
    std::fill(o, o + rows * dv_pad, 0.0f);
    std::fill(m, m + rows, neg_inf);
    std::fill(l, l + rows, 0.0f);

    // Only the key tiles the causal rule and the window leave to some row of this query tile.
    const TileSpan span = key_tiles_of(cfg.mask, dims, r0, rows);
    skipped += k_tiles - (span.end - span.first);
    for (std::size_t j = span.first; j < span.end; ++j) {
      const std::size_t c0 = j * bc, cols = std::min(bc, seq_k - c0);
      ++computed;
      const float* ktile = kt.data() + (h * k_tiles + j) * kt_tile;
      // S = scale Q_i K_j^T for the whole padded tile (micro-kernel).
      detail::score_tile(q.data() + (h * seq_q + r0) * d, d, ktile, bc_pad, s, bc_pad, rows, bc_pad, scale);
      for (std::size_t r = 0; r < rows; ++r) {
        float* srow = s + r * bc_pad;
        const std::size_t i = r0 + r;
        const IndexRange visible = visible_columns(cfg.mask, dims, i, c0, cols);
        if (visible.empty()) {  // the mask hides the whole tile from this row: P row = 0
          std::fill(srow, srow + bc_pad, 0.0f);
          continue;
        }
        // Masked and padded columns: -inf, so that e^{S - m'} is 0 there.
        std::fill(srow, srow + visible.begin, neg_inf);
        std::fill(srow + visible.end, srow + bc_pad, neg_inf);
        // m' = max(m, rowmax S); P~ = e^{S - m'}; l' = e^{m - m'} l + rowsum P~; O~ row *= e^{m - m'}.
        detail::online_softmax_row(srow, bc_pad, m[r], l[r], o + r * dv_pad, dv_pad);
      }
      // O~ += P~ V_j (micro-kernel).
      detail::accumulate_pv(s, bc_pad, vp.data() + (h * k_tiles + j) * v_tile, dv_pad, o, rows, cols);
    }
    // O = O~ / l, L = m + ln l; a row that saw no key gets O = 0, L = -inf.
    for (std::size_t r = 0; r < rows; ++r) {
      float* out = result.out.data() + (h * seq_q + r0 + r) * d_v;
      const bool seen = l[r] > 0.0f;
      const float inv_l = seen ? 1.0f / l[r] : 0.0f;
      for (std::size_t e = 0; e < d_v; ++e) out[e] = o[r * dv_pad + e] * inv_l;
      result.lse(h, r0 + r) = seen ? m[r] + std::log(l[r]) : neg_inf;
    }
  }
  result.tiles_computed = computed;
  result.tiles_skipped = skipped;
  return result;
}

// ---------------------------------------------------------------------------------------- v3

FlashOutput flash_attention_forward_v3(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg) {
  using detail::kTileCols;
  const double scale = validate_flash("flash_attention_forward", q, k, v, cfg);
  require_fp32_flash("flash_attention_forward", cfg);
  require_supported("flash_attention_forward", cfg.mask, kFlashMaskSupport);
  const FlashDims dims(q, k, v, cfg);
  const auto& [heads, seq_q, d, seq_k, d_v, br, bc, q_tiles, k_tiles] = dims;
  constexpr float neg_inf = -std::numeric_limits<float>::infinity();
  constexpr std::size_t kRows = 6;  // query rows per micro-kernel block: 6 x kVectors accumulators

  // Each key tile is worked in steps of `step` keys whose packed K^T ([d, step] floats) fills at
  // most half of L1: 128 keys at d = 64, 64 at d = 128. The score micro-kernel then finds K^T in
  // L1 for every block of 6 query rows, and the P V kernel finds V.
  const std::size_t bc_pad = round_up(bc, kTileCols), dv_pad = round_up(d_v, kTileCols);
  const std::size_t step = std::clamp(kHalfL1Floats / d / kTileCols * kTileCols, kTileCols, bc_pad);
  const std::size_t steps = (bc + step - 1) / step;  // per key tile

  // Packed once per call: K^T per (head, key tile, step), [d, step] with zeros in the padding.
  // V's rows are read in place (copied only when d_v is not a whole number of micro-kernel blocks).
  const std::size_t kt_step = d * step;
  const auto kt = unfilled_floats(heads * k_tiles * steps * kt_step);
  const PaddedRows v_rows(v, dv_pad);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t t = 0; t < static_cast<std::ptrdiff_t>(heads * k_tiles); ++t) {
    const std::size_t h = static_cast<std::size_t>(t) / k_tiles, c0 = (static_cast<std::size_t>(t) % k_tiles) * bc;
    const std::size_t cols = std::min(bc, seq_k - c0);
    float* tile = kt.get() + static_cast<std::size_t>(t) * steps * kt_step;
    std::fill(tile, tile + steps * kt_step, 0.0f);  // zeros in the padding
    for (std::size_t c = 0; c < cols; ++c) {
      const float* krow = k.data() + (h * seq_k + c0 + c) * d;
      float* kt_column = tile + (c / step) * kt_step + c % step;
      for (std::size_t e = 0; e < d; ++e) kt_column[e * step] = krow[e];
    }
  }

  FlashOutput result{Tensor3::from_shape({heads, seq_q, d_v}), Tensor2::from_shape({heads, seq_q}), 0, 0};
  const int threads = omp_get_max_threads();
  // Per thread: Q's rows times scale log2 e [br, d], the score tile [br, step], the accumulator
  // O~ [br, dv_pad], per row the tile's max, the running max m and kLanes partial sums of l.
  const std::size_t per_thread = br * d + br * step + br * dv_pad + br * (2 + detail::kLanes);
  std::vector<float> scratch(static_cast<std::size_t>(threads) * per_thread);
  // e^{scale q.k} = 2^{(scale log2 e q).k}: the scale and the change of base ride on Q, once.
  const auto q_factor = static_cast<float>(scale * std::numbers::log2e);
  std::size_t computed = 0, skipped = 0;

#pragma omp parallel for schedule(dynamic) num_threads(threads) reduction(+ : computed, skipped)
  for (std::ptrdiff_t task = 0; task < static_cast<std::ptrdiff_t>(heads * q_tiles); ++task) {
    const std::size_t h = static_cast<std::size_t>(task) / q_tiles, r0 = (static_cast<std::size_t>(task) % q_tiles) * br;
    const std::size_t rows = std::min(br, seq_q - r0);
    float* q_rows = scratch.data() + static_cast<std::size_t>(omp_get_thread_num()) * per_thread;
    float* s = q_rows + br * d;
    float* o = s + br * step;
    float* row_max = o + br * dv_pad;
    float* m = row_max + br;
    float* l_lanes = m + br;
    const float* q_tile = q.data() + (h * seq_q + r0) * d;
    for (std::size_t x = 0; x < rows * d; ++x) q_rows[x] = q_factor * q_tile[x];
    std::fill(o, o + rows * dv_pad, 0.0f);
    std::fill(m, m + rows, neg_inf);
    std::fill(l_lanes, l_lanes + rows * detail::kLanes, 0.0f);

    // Only the key tiles the causal rule and the window leave to some row of this query tile.
    const TileSpan span = key_tiles_of(cfg.mask, dims, r0, rows);
    skipped += k_tiles - (span.end - span.first);
    for (std::size_t j = span.first; j < span.end; ++j) {
      ++computed;
      const std::size_t tile_cols = std::min(bc, seq_k - j * bc);
      for (std::size_t first = 0; first < tile_cols; first += step) {
        const std::size_t c0 = j * bc + first, cols = std::min(step, tile_cols - first);
        const std::size_t width = round_up(cols, kTileCols);
        // S = Q' K^T (6-row micro-kernel) with each row's max on the way out.
        detail::score_tile<kRows>(q_rows, d, kt.get() + ((h * k_tiles + j) * steps + first / step) * kt_step, step, s,
                                  step, rows, width, 1.0f, row_max);
        for (std::size_t r = 0; r < rows; ++r) {
          float* srow = s + r * step;
          const IndexRange visible = visible_columns(cfg.mask, dims, r0 + r, c0, cols);
          if (visible.empty()) {  // the mask hides the whole step from this row: P row = 0
            std::fill(srow, srow + width, 0.0f);
            continue;
          }
          if (visible.begin > 0 || visible.end < width) {  // hidden or padding columns: -inf, max again
            std::fill(srow, srow + visible.begin, neg_inf);
            std::fill(srow + visible.end, srow + width, neg_inf);
            row_max[r] = *std::max_element(srow + visible.begin, srow + visible.end);
          }
          detail::online_softmax_row_base2(srow, width, row_max[r], m[r], l_lanes + r * detail::kLanes, o + r * dv_pad,
                                           dv_pad);
        }
        // O~ += P~ V (6-row micro-kernel).
        detail::accumulate_pv<kRows>(s, step, v_rows.data() + (h * seq_k + c0) * dv_pad, dv_pad, o, rows, cols);
      }
    }
    // O = O~ / l, L = (m + log2 l) ln 2 (back to base e); a row that saw no key: O = 0, L = -inf.
    for (std::size_t r = 0; r < rows; ++r) {
      float* out = result.out.data() + (h * seq_q + r0 + r) * d_v;
      const float* lanes = l_lanes + r * detail::kLanes;
      const float l = std::accumulate(lanes, lanes + detail::kLanes, 0.0f);
      const bool seen = l > 0.0f;
      const float inv_l = seen ? 1.0f / l : 0.0f;
      for (std::size_t e = 0; e < d_v; ++e) out[e] = o[r * dv_pad + e] * inv_l;
      result.lse(h, r0 + r) = seen ? static_cast<float>((m[r] + std::log2(l)) * std::numbers::ln2) : neg_inf;
    }
  }
  result.tiles_computed = computed;
  result.tiles_skipped = skipped;
  return result;
}

// ---------------------------------------------------------------------------------- backward

FlashGrads flash_attention_backward_v1(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor3& out,
                                       const Tensor2& lse, const Tensor3& dout, const FlashConfig& cfg) {
  const auto scale =
      static_cast<float>(validate_flash_backward("flash_attention_backward", q, k, v, out, lse, dout, cfg));
  require_supported("flash_attention_backward", cfg.mask, kFlashMaskSupport);
  const FlashDims dims(q, k, v, cfg);
  const auto& [heads, seq_q, d, seq_k, d_v, br, bc, q_tiles, k_tiles] = dims;
  constexpr float neg_inf = -std::numeric_limits<float>::infinity();

  // D_i = rowsum(dO_i o O_i), once per query row.
  std::vector<float> delta(heads * seq_q);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t r = 0; r < static_cast<std::ptrdiff_t>(heads * seq_q); ++r) {
    const float* o_row = out.data() + static_cast<std::size_t>(r) * d_v;
    const float* do_row = dout.data() + static_cast<std::size_t>(r) * d_v;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (std::size_t e = 0; e < d_v; ++e) sum += o_row[e] * do_row[e];
    delta[static_cast<std::size_t>(r)] = sum;
  }

  // For query i and key j (visible, query seen some key): P_ij = e^{scale q_i.k_j - L_i} and
  // dS_ij = P_ij (dO_i.v_j - D_i); the two passes below call this for their own loop order.
  auto p_and_ds = [&](std::size_t h, std::size_t i, std::size_t j, float& p, float& ds) {
    const float* qi = q.data() + (h * seq_q + i) * d;
    const float* kj = k.data() + (h * seq_k + j) * d;
    const float* doi = dout.data() + (h * seq_q + i) * d_v;
    const float* vj = v.data() + (h * seq_k + j) * d_v;
    float dot = 0.0f, dp = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (std::size_t e = 0; e < d; ++e) dot += qi[e] * kj[e];
#pragma omp simd reduction(+ : dp)
    for (std::size_t e = 0; e < d_v; ++e) dp += doi[e] * vj[e];
    p = std::exp(scale * dot - lse(h, i));
    ds = p * (dp - delta[h * seq_q + i]);
  };
  auto saw_keys = [&](std::size_t h, std::size_t i) { return lse(h, i) != neg_inf; };

  FlashGrads g{xt::zeros<float>({heads, seq_q, d}), xt::zeros<float>({heads, seq_k, d}), xt::zeros<float>({heads, seq_k, d_v})};
  // Pass 1, threads over (head, key tile): dV_j += P^T dO, dK_j += scale dS^T Q.
#pragma omp parallel for schedule(dynamic)
  for (std::ptrdiff_t task = 0; task < static_cast<std::ptrdiff_t>(heads * k_tiles); ++task) {
    const std::size_t h = static_cast<std::size_t>(task) / k_tiles, c0 = (static_cast<std::size_t>(task) % k_tiles) * bc;
    const std::size_t c1 = std::min(seq_k, c0 + bc);
    for (std::size_t j = c0; j < c1; ++j) {
      float* dk = g.dk.data() + (h * seq_k + j) * d;
      float* dv = g.dv.data() + (h * seq_k + j) * d_v;
      // Key j is seen by the queries of its query range only (causal rule, window).
      const IndexRange queries = cfg.mask.query_range(j, seq_q, seq_k);
      for (std::size_t i = queries.begin; i < queries.end; ++i) {
        if (!saw_keys(h, i)) continue;
        float p = 0.0f, ds = 0.0f;
        p_and_ds(h, i, j, p, ds);
        const float* doi = dout.data() + (h * seq_q + i) * d_v;
        const float* qi = q.data() + (h * seq_q + i) * d;
#pragma omp simd
        for (std::size_t e = 0; e < d_v; ++e) dv[e] += p * doi[e];
#pragma omp simd
        for (std::size_t e = 0; e < d; ++e) dk[e] += scale * ds * qi[e];
      }
    }
  }
  // Pass 2, threads over (head, query tile): dQ_i += scale dS K.
#pragma omp parallel for schedule(dynamic)
  for (std::ptrdiff_t task = 0; task < static_cast<std::ptrdiff_t>(heads * q_tiles); ++task) {
    const std::size_t h = static_cast<std::size_t>(task) / q_tiles, r0 = (static_cast<std::size_t>(task) % q_tiles) * br;
    const std::size_t r1 = std::min(seq_q, r0 + br);
    for (std::size_t i = r0; i < r1; ++i) {
      float* dq = g.dq.data() + (h * seq_q + i) * d;
      if (!saw_keys(h, i)) continue;
      const IndexRange keys = cfg.mask.key_range(i, seq_q, seq_k);
      for (std::size_t j = keys.begin; j < keys.end; ++j) {
        float p = 0.0f, ds = 0.0f;
        p_and_ds(h, i, j, p, ds);
        const float* kj = k.data() + (h * seq_k + j) * d;
#pragma omp simd
        for (std::size_t e = 0; e < d; ++e) dq[e] += scale * ds * kj[e];
      }
    }
  }
  return g;
}

namespace {

// What the backward versions on micro-kernels share: the inputs packed once per call, D_i, and
// the work on one (query tile, key tile) pair and on one key tile. Packed per head: K^T and V^T
// per key tile ([d, bc_pad], [d_v, bc_pad]) for S = Q K^T and dP = dO V^T; K, Q and dO padded to
// whole micro-kernel widths for the accumulations dQ += dS K, dK += dS^T Q and dV += P^T dO.
struct BackwardTiles {
  const Tensor3 &q, &dout;
  const Tensor2& lse;
  const FlashConfig& cfg;
  FlashDims dims;
  float scale;
  std::size_t bc_pad, br_pad, d_pad, dv_pad;
  PaddedRows k_pad, q_pad, do_pad;
  std::unique_ptr<float[]> kt, vt, delta;
  std::size_t per_thread;  // scratch floats per thread: see key_tile

  BackwardTiles(const Tensor3& q_, const Tensor3& k, const Tensor3& v, const Tensor3& out, const Tensor2& lse_,
                const Tensor3& dout_, const FlashConfig& cfg_, float scale_)
      : q(q_), dout(dout_), lse(lse_), cfg(cfg_), dims(q_, k, v, cfg_), scale(scale_),
        bc_pad(round_up(dims.bc, detail::kTileCols)), br_pad(round_up(dims.br, detail::kTileCols)),
        d_pad(round_up(dims.d, detail::kTileCols)), dv_pad(round_up(dims.d_v, detail::kTileCols)), k_pad(k, d_pad),
        q_pad(q_, d_pad), do_pad(dout_, dv_pad) {
    const auto& [heads, seq_q, d, seq_k, d_v, br, bc, q_tiles, k_tiles] = dims;
    // Per thread: p, dp, ds [br, bc_pad]; the transposes of p and dS [bc, br_pad]; the dK and dV
    // accumulators [bc, d_pad + dv_pad] (or a dQ accumulator [br, d_pad] in the dQ pass).
    per_thread = 3 * br * bc_pad + 2 * bc * br_pad + bc * (d_pad + dv_pad) + br * d_pad;
    kt = unfilled_floats(heads * k_tiles * d * bc_pad);
    vt = unfilled_floats(heads * k_tiles * d_v * bc_pad);
    delta = unfilled_floats(heads * seq_q);
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t t = 0; t < static_cast<std::ptrdiff_t>(heads * k_tiles); ++t) {
      const std::size_t h = static_cast<std::size_t>(t) / k_tiles, c0 = (static_cast<std::size_t>(t) % k_tiles) * bc;
      float* kt_tile = kt.get() + static_cast<std::size_t>(t) * d * bc_pad;
      float* vt_tile = vt.get() + static_cast<std::size_t>(t) * d_v * bc_pad;
      std::fill(kt_tile, kt_tile + d * bc_pad, 0.0f);  // zeros in the padding
      std::fill(vt_tile, vt_tile + d_v * bc_pad, 0.0f);
      for (std::size_t c = 0; c < std::min(bc, seq_k - c0); ++c) {
        const float* krow = k.data() + (h * seq_k + c0 + c) * d;
        const float* vrow = v.data() + (h * seq_k + c0 + c) * d_v;
        for (std::size_t e = 0; e < d; ++e) kt_tile[e * bc_pad + c] = krow[e];
        for (std::size_t e = 0; e < d_v; ++e) vt_tile[e * bc_pad + c] = vrow[e];
      }
    }
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t r = 0; r < static_cast<std::ptrdiff_t>(heads * seq_q); ++r) {
      const auto row = static_cast<std::size_t>(r);
      float sum = 0.0f;  // D_i = rowsum(dO_i o O_i)
      for (std::size_t e = 0; e < d_v; ++e) sum += out.data()[row * d_v + e] * dout.data()[row * d_v + e];
      delta[row] = sum;
    }
  }

  // P and scale * dS of query tile [r0, r0 + rows) against key tile j, into p and ds
  // ([rows, bc_pad]); masked keys, padding and queries that saw no key give 0. dp is scratch.
  // kV4: 6-row micro-kernels, and whole registers for P and dS. The scores come out in base 2,
  // S' = (scale log2 e) Q K^T, so P = 2^{S' - L log2 e} by fast_exp2 over the padded row; the
  // hidden keys and the padding are set to 0 afterwards.
  template <bool kV4 = false>
  void p_and_ds(std::size_t h, std::size_t r0, std::size_t rows, std::size_t j, float* p, float* dp, float* ds) const {
    using detail::FloatBatch;
    const auto& [heads, seq_q, d, seq_k, d_v, br, bc, q_tiles, k_tiles] = dims;
    constexpr float neg_inf = -std::numeric_limits<float>::infinity();
    constexpr std::size_t kRows = kV4 ? 6 : 4;
    const auto log2e = static_cast<float>(kV4 ? std::numbers::log2e : 1.0);
    const std::size_t c0 = j * bc, cols = std::min(bc, seq_k - c0);
    detail::score_tile<kRows>(q.data() + (h * seq_q + r0) * d, d, kt.get() + (h * k_tiles + j) * d * bc_pad, bc_pad, p,
                              bc_pad, rows, bc_pad, scale * log2e);
    detail::score_tile<kRows>(dout.data() + (h * seq_q + r0) * d_v, d_v, vt.get() + (h * k_tiles + j) * d_v * bc_pad,
                              bc_pad, dp, bc_pad, rows, bc_pad, 1.0f);
    for (std::size_t r = 0; r < rows; ++r) {
      const std::size_t i = r0 + r;
      const float l_i = lse(h, i), d_i = delta[h * seq_q + i];
      const IndexRange visible = l_i == neg_inf ? IndexRange{} : visible_columns(cfg.mask, dims, i, c0, cols);
      float* prow = p + r * bc_pad;
      float* dprow = dp + r * bc_pad;
      float* dsrow = ds + r * bc_pad;
      if constexpr (kV4) {
        if (!visible.empty()) {
          const FloatBatch lse_base2(l_i * log2e), delta_i(d_i), vscale(scale);
          for (std::size_t c = 0; c < bc_pad; c += detail::kLanes) {
            const FloatBatch pc = detail::fast_exp2(FloatBatch::load_unaligned(prow + c) - lse_base2);  // P = 2^{S' - L'}
            pc.store_unaligned(prow + c);
            (vscale * pc * (FloatBatch::load_unaligned(dprow + c) - delta_i)).store_unaligned(dsrow + c);
          }
        }
      } else {
        for (std::size_t c = visible.begin; c < visible.end; ++c) {
          prow[c] = std::exp(prow[c] - l_i);              // P = e^{S - L}
          dsrow[c] = scale * prow[c] * (dprow[c] - d_i);  // scale dS = scale P (dP - D)
        }
      }
      std::fill(prow, prow + visible.begin, 0.0f);
      std::fill(dsrow, dsrow + visible.begin, 0.0f);
      std::fill(prow + visible.end, prow + bc_pad, 0.0f);
      std::fill(dsrow + visible.end, dsrow + bc_pad, 0.0f);
    }
  }

  // Key tile j of head h against every query tile that sees it: dV_j = sum P^T dO and
  // dK_j = sum scale dS^T Q, written to g; with `dq_partial` ([seq_q, d_pad] of this head), also
  // dQ += scale dS K_j there, so one pass computes all three gradients.
  // kV4: p_and_ds<true>, 6-row micro-kernels, and dV, dK accumulated straight from the tiles of P
  // and dS (accumulate_pv's kTransposedP) instead of from transposed copies.
  template <bool kV4 = false>
  void key_tile(std::size_t h, std::size_t j, float* scratch, FlashGrads& g, float* dq_partial) const {
    const auto& [heads, seq_q, d, seq_k, d_v, br, bc, q_tiles, k_tiles] = dims;
    const std::size_t c0 = j * bc, cols = std::min(bc, seq_k - c0);
    float* p = scratch;
    float* dp = p + br * bc_pad;
    float* ds = dp + br * bc_pad;
    float* pt = ds + br * bc_pad;
    float* dst = pt + bc * br_pad;
    float* dk_acc = dst + bc * br_pad;
    float* dv_acc = dk_acc + bc * d_pad;
    std::fill(dk_acc, dk_acc + bc * (d_pad + dv_pad), 0.0f);
    // Only the queries whose key range meets this tile (causal rule, window) see any of it.
    const IndexRange queries = cfg.mask.query_range_of_keys(c0, c0 + cols, seq_q, seq_k);
    for (std::size_t r0 = queries.begin / br * br; r0 < queries.end; r0 += br) {
      const std::size_t rows = std::min(br, seq_q - r0);
      p_and_ds<kV4>(h, r0, rows, j, p, dp, ds);
      if constexpr (kV4) {
        // dQ_i += scale dS K_j;  dV_j += P^T dO_i;  dK_j += scale dS^T Q_i (P, dS read column-wise).
        detail::accumulate_pv<6>(ds, bc_pad, k_pad.data() + (h * seq_k + c0) * d_pad, d_pad, dq_partial + r0 * d_pad,
                                 rows, cols);
        detail::accumulate_pv<6, true>(p, bc_pad, do_pad.data() + (h * seq_q + r0) * dv_pad, dv_pad, dv_acc, cols, rows);
        detail::accumulate_pv<6, true>(ds, bc_pad, q_pad.data() + (h * seq_q + r0) * d_pad, d_pad, dk_acc, cols, rows);
        continue;
      }
      if (dq_partial)
        detail::accumulate_pv(ds, bc_pad, k_pad.data() + (h * seq_k + c0) * d_pad, d_pad, dq_partial + r0 * d_pad, rows,
                              cols);
      // Transpose P and scale dS to [cols, rows] (zero-padded to br_pad) for the accumulations.
      std::fill(pt, pt + 2 * bc * br_pad, 0.0f);
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) {
          pt[c * br_pad + r] = p[r * bc_pad + c];
          dst[c * br_pad + r] = ds[r * bc_pad + c];
        }
      detail::accumulate_pv(pt, br_pad, do_pad.data() + (h * seq_q + r0) * dv_pad, dv_pad, dv_acc, cols, rows);
      detail::accumulate_pv(dst, br_pad, q_pad.data() + (h * seq_q + r0) * d_pad, d_pad, dk_acc, cols, rows);
    }
    for (std::size_t c = 0; c < cols; ++c) {
      std::copy(dk_acc + c * d_pad, dk_acc + c * d_pad + d, g.dk.data() + (h * seq_k + c0 + c) * d);
      std::copy(dv_acc + c * dv_pad, dv_acc + c * dv_pad + d_v, g.dv.data() + (h * seq_k + c0 + c) * d_v);
    }
  }

  FlashGrads zero_grads() const {
    return {xt::zeros<float>({dims.heads, dims.seq_q, dims.d}), xt::zeros<float>({dims.heads, dims.seq_k, dims.d}),
            xt::zeros<float>({dims.heads, dims.seq_k, dims.d_v})};
  }
};

}  // namespace

// v2: the two passes of v1 with the tile products on the micro-kernels of the forward v2.
FlashGrads flash_attention_backward_v2(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor3& out,
                                       const Tensor2& lse, const Tensor3& dout, const FlashConfig& cfg) {
  const auto scale =
      static_cast<float>(validate_flash_backward("flash_attention_backward", q, k, v, out, lse, dout, cfg));
  require_supported("flash_attention_backward", cfg.mask, kFlashMaskSupport);
  const BackwardTiles tiles(q, k, v, out, lse, dout, cfg, scale);
  const auto& [heads, seq_q, d, seq_k, d_v, br, bc, q_tiles, k_tiles] = tiles.dims;
  FlashGrads g = tiles.zero_grads();
  const int threads = omp_get_max_threads();
  std::vector<float> scratch(static_cast<std::size_t>(threads) * tiles.per_thread);

  // Pass 1, threads over (head, key tile): dV_j and dK_j.
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (std::ptrdiff_t task = 0; task < static_cast<std::ptrdiff_t>(heads * k_tiles); ++task)
    tiles.key_tile(static_cast<std::size_t>(task) / k_tiles, static_cast<std::size_t>(task) % k_tiles,
                   scratch.data() + static_cast<std::size_t>(omp_get_thread_num()) * tiles.per_thread, g, nullptr);
  // Pass 2, threads over (head, query tile): dQ_i += scale dS K, P and dS recomputed.
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (std::ptrdiff_t task = 0; task < static_cast<std::ptrdiff_t>(heads * q_tiles); ++task) {
    const std::size_t h = static_cast<std::size_t>(task) / q_tiles, r0 = (static_cast<std::size_t>(task) % q_tiles) * br;
    const std::size_t rows = std::min(br, seq_q - r0);
    float* p = scratch.data() + static_cast<std::size_t>(omp_get_thread_num()) * tiles.per_thread;
    float* dp = p + br * tiles.bc_pad;
    float* ds = dp + br * tiles.bc_pad;
    float* dq_acc = ds + br * tiles.bc_pad;
    std::fill(dq_acc, dq_acc + rows * tiles.d_pad, 0.0f);
    const TileSpan span = key_tiles_of(cfg.mask, tiles.dims, r0, rows);  // the other key tiles are hidden
    for (std::size_t j = span.first; j < span.end; ++j) {
      const std::size_t c0 = j * bc, cols = std::min(bc, seq_k - c0);
      tiles.p_and_ds(h, r0, rows, j, p, dp, ds);
      detail::accumulate_pv(ds, tiles.bc_pad, tiles.k_pad.data() + (h * seq_k + c0) * tiles.d_pad, tiles.d_pad, dq_acc,
                            rows, cols);
    }
    for (std::size_t r = 0; r < rows; ++r)
      std::copy(dq_acc + r * tiles.d_pad, dq_acc + r * tiles.d_pad + d, g.dq.data() + (h * seq_q + r0 + r) * d);
  }
  return g;
}

// v3: one pass. Threads share a head's key tiles; each adds its dQ contributions to a private
// [seq_q, d_pad] buffer, and the buffers are summed once the head is done.
FlashGrads flash_attention_backward_v3(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor3& out,
                                       const Tensor2& lse, const Tensor3& dout, const FlashConfig& cfg) {
  const auto scale =
      static_cast<float>(validate_flash_backward("flash_attention_backward", q, k, v, out, lse, dout, cfg));
  require_supported("flash_attention_backward", cfg.mask, kFlashMaskSupport);
  const BackwardTiles tiles(q, k, v, out, lse, dout, cfg, scale);
  const auto& [heads, seq_q, d, seq_k, d_v, br, bc, q_tiles, k_tiles] = tiles.dims;
  FlashGrads g = tiles.zero_grads();
  const int threads = omp_get_max_threads();
  const std::size_t partial_size = seq_q * tiles.d_pad;
  std::vector<float> scratch(static_cast<std::size_t>(threads) * tiles.per_thread);
  std::vector<float> dq_partials(static_cast<std::size_t>(threads) * partial_size);
#pragma omp parallel num_threads(threads)
  {
    const auto me = static_cast<std::size_t>(omp_get_thread_num());
    const auto team = static_cast<std::size_t>(omp_get_num_threads());
    float* mine = dq_partials.data() + me * partial_size;
    for (std::size_t h = 0; h < heads; ++h) {
      std::fill(mine, mine + partial_size, 0.0f);
#pragma omp for schedule(dynamic)
      for (std::ptrdiff_t j = 0; j < static_cast<std::ptrdiff_t>(k_tiles); ++j)
        tiles.key_tile(h, static_cast<std::size_t>(j), scratch.data() + me * tiles.per_thread, g, mine);
      // (the loop's barrier: every partial of head h is complete)
      // dQ_i = sum over threads of their partial rows.
#pragma omp for schedule(static)
      for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(seq_q); ++i) {
        float* dq_row = g.dq.data() + (h * seq_q + static_cast<std::size_t>(i)) * d;
        for (std::size_t t = 0; t < team; ++t) {
          const float* part = dq_partials.data() + t * partial_size + static_cast<std::size_t>(i) * tiles.d_pad;
          for (std::size_t e = 0; e < d; ++e) dq_row[e] += part[e];
        }
      }
      // (the barrier again: no thread clears its partial before the sums have read it)
    }
  }
  return g;
}

// v4: threads over heads, as ATen's CPU kernel: a head's three gradients accumulate in place in
// its thread's buffers, with v3's tile pair (five products) on 6-row kernels and whole registers.
FlashGrads flash_attention_backward_v4(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor3& out,
                                       const Tensor2& lse, const Tensor3& dout, const FlashConfig& cfg) {
  const auto scale =
      static_cast<float>(validate_flash_backward("flash_attention_backward", q, k, v, out, lse, dout, cfg));
  require_supported("flash_attention_backward", cfg.mask, kFlashMaskSupport);
  // Tiles of at most as many rows as fill half of L1 with one [rows, d] operand (K^T, K, Q or dO
  // of a tile pair): 128 at d = 64, 64 at d = 128, and never more than cfg asks for. With 128 rows
  // at d = 128, every operand of the five products was 64 KiB and came from L2 (12-15% slower).
  const std::size_t width = round_up(std::max(q.shape()[2], v.shape()[2]), detail::kTileCols);
  const std::size_t l1_rows = std::max(detail::kTileCols, kHalfL1Floats / width);
  FlashConfig l1_tiles = cfg;
  l1_tiles.block_q = std::min(cfg.block_q, l1_rows);
  l1_tiles.block_k = std::min(cfg.block_k, l1_rows);
  const BackwardTiles tiles(q, k, v, out, lse, dout, l1_tiles, scale);
  const auto& [heads, seq_q, d, seq_k, d_v, br, bc, q_tiles, k_tiles] = tiles.dims;
  // Not zeroed: each head's thread writes every row of its dQ, dK and dV once.
  FlashGrads g{Tensor3::from_shape({heads, seq_q, d}), Tensor3::from_shape({heads, seq_k, d}),
               Tensor3::from_shape({heads, seq_k, d_v})};
  // Per thread: the tiles of key_tile, and dQ of the head it works on, [seq_q, d_pad].
  const std::size_t per_thread = tiles.per_thread + seq_q * tiles.d_pad;
  std::vector<float> scratch(static_cast<std::size_t>(omp_get_max_threads()) * per_thread);
#pragma omp parallel for schedule(dynamic)
  for (std::ptrdiff_t head = 0; head < static_cast<std::ptrdiff_t>(heads); ++head) {
    const auto h = static_cast<std::size_t>(head);
    float* mine = scratch.data() + static_cast<std::size_t>(omp_get_thread_num()) * per_thread;
    float* dq_head = mine + tiles.per_thread;
    std::fill(dq_head, dq_head + seq_q * tiles.d_pad, 0.0f);
    for (std::size_t j = 0; j < k_tiles; ++j) tiles.key_tile<true>(h, j, mine, g, dq_head);
    for (std::size_t i = 0; i < seq_q; ++i)
      std::copy(dq_head + i * tiles.d_pad, dq_head + i * tiles.d_pad + d, g.dq.data() + (h * seq_q + i) * d);
  }
  return g;
}

FlashGrads flash_attention_backward(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor3& out,
                                    const Tensor2& lse, const Tensor3& dout, const FlashConfig& cfg) {
  // v4 gives each thread whole heads: when the heads split evenly over the threads. Otherwise v3's
  // threads share one head's key tiles; with fewer than two tiles per thread they would idle, and
  // v2's tasks over (head, tile) of all heads keep them busy instead.
  if (q.shape()[0] % static_cast<std::size_t>(omp_get_max_threads()) == 0)
    return flash_attention_backward_v4(q, k, v, out, lse, dout, cfg);
  const std::size_t k_tiles = (k.shape()[1] + std::max<std::size_t>(cfg.block_k, 1) - 1) / std::max<std::size_t>(cfg.block_k, 1);
  if (k_tiles >= 2 * static_cast<std::size_t>(omp_get_max_threads()))
    return flash_attention_backward_v3(q, k, v, out, lse, dout, cfg);
  return flash_attention_backward_v2(q, k, v, out, lse, dout, cfg);
}

const std::vector<FlashVariant>& flash_variants() {
  static const std::vector<FlashVariant> variants = {
      {"v1", "the tiled loops in float: threads over (head, query tile), contiguous SIMD dot products and axpys",
       flash_attention_forward_v1},
      {"v2", "register-blocked SIMD micro-kernels for S = Q K^T and O += P V on K^T and V packed once per tile, "
             "vectorised online softmax",
       flash_attention_forward_v2},
      {"v3", "6-row micro-kernels with the row max kept on the way out, key steps sized to L1, a polynomial 2^x on "
             "scores in base 2 (Q times scale log2 e), the output rescaled only when the max grows",
       flash_attention_forward_v3},
  };
  return variants;
}

FlashOutput flash_attention_forward(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg) {
  return flash_variants().back().function(q, k, v, cfg);
}

}  // namespace tvlab::opt
