#include "tvlab/opt/sparse_attention.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"

#include "detail/blas.hpp"
#include "detail/flash_tiles.hpp"

namespace tvlab::opt {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::size_t round_up(std::size_t x, std::size_t multiple) { return (x + multiple - 1) / multiple * multiple; }

// The checks of ref::block_sparse_attention, with the same messages; returns the scale.
float validate_block_sparse(const Tensor3& q, const Tensor3& k, const Tensor3& v, const HeadLayouts& layouts,
                            const std::optional<double>& scale) {
  const char* fn = "block_sparse_attention";
  const double s = validate_sparse_attention(fn, q, k, v, scale);
  validate_head_layouts(fn, "layouts", layouts, q.shape()[0], q.shape()[1], k.shape()[1]);
  return static_cast<float>(s);
}

// The checks of ref::sliding_window_attention, with the same messages; returns the scale.
float validate_window(const Tensor3& q, const Tensor3& k, const Tensor3& v, SlidingWindow window,
                      const std::optional<double>& scale) {
  const char* fn = "sliding_window_attention";
  const double s = validate_sparse_attention(fn, q, k, v, scale);
  validate_sliding_window(fn, window, q.shape()[1], k.shape()[1]);
  return static_cast<float>(s);
}

FlashOutput empty_output(const Tensor3& q, const Tensor3& v) {
  return FlashOutput{Tensor3::from_shape({q.shape()[0], q.shape()[1], v.shape()[2]}),
                     Tensor2::from_shape({q.shape()[0], q.shape()[1]}), 0, 0};
}

// The tiles a block-sparse kernel computes (the listed blocks) and skips (the rest of the grid).
void count_tiles(const HeadLayouts& layouts, std::size_t heads, FlashOutput& result) {
  for (std::size_t h = 0; h < heads; ++h) {
    const BlockLayout& layout = layout_of_head(layouts, h);
    result.tiles_computed += layout.blocks();
    result.tiles_skipped += layout.query_blocks() * layout.key_block_count() - layout.blocks();
  }
}

// The (head, query block) pairs as one flat task index: head h owns tasks
// [first_task[h], first_task[h + 1]), one per query block of its layout (the heads' layouts may
// use different block sizes).
std::vector<std::size_t> first_tasks(const HeadLayouts& layouts, std::size_t heads) {
  std::vector<std::size_t> first(heads + 1, 0);
  for (std::size_t h = 0; h < heads; ++h) first[h + 1] = first[h] + layout_of_head(layouts, h).query_blocks();
  return first;
}

// The final step of the online softmax for rows [i0, i0 + rows) of head h: O = O~ / l and
// L = m + ln l; a row that saw no key gets O = 0 and L = -inf (as the reference).
void write_rows(FlashOutput& result, std::size_t h, std::size_t i0, std::size_t rows, const float* o, std::size_t ldo,
                const float* m, const float* l) {
  const std::size_t seq_q = result.out.shape()[1], d_v = result.out.shape()[2];
  for (std::size_t r = 0; r < rows; ++r) {
    float* out = result.out.data() + (h * seq_q + i0 + r) * d_v;
    const bool seen = l[r] > 0.0f;
    const float inv_l = seen ? 1.0f / l[r] : 0.0f;
#pragma omp simd
    for (std::size_t e = 0; e < d_v; ++e) out[e] = o[r * ldo + e] * inv_l;
    result.lse(h, i0 + r) = seen ? m[r] + std::log(l[r]) : kNegInf;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------- v1

FlashOutput block_sparse_attention_v1(const Tensor3& q, const Tensor3& k, const Tensor3& v, const HeadLayouts& layouts,
                                      std::optional<double> scale_option) {
  const float scale = validate_block_sparse(q, k, v, layouts, scale_option);
  const std::size_t heads = q.shape()[0], seq_q = q.shape()[1], d = q.shape()[2], seq_k = k.shape()[1],
                    d_v = v.shape()[2];
  FlashOutput result = empty_output(q, v);
  count_tiles(layouts, heads, result);
  const std::vector<std::size_t> first = first_tasks(layouts, heads);
  std::size_t widest_block = 0;
  for (const BlockLayout& layout : layouts) widest_block = std::max(widest_block, layout.block_k);

  // Per thread: one block's scores and one row's output accumulator O~ (allocated before the threads
  // start: an allocation that fails inside an OpenMP region could not be reported as an exception).
  const std::size_t per_thread = widest_block + d_v;
  std::vector<float> scratch(static_cast<std::size_t>(omp_get_max_threads()) * per_thread);

#pragma omp parallel
  {
    float* s = scratch.data() + static_cast<std::size_t>(omp_get_thread_num()) * per_thread;
    float* o = s + widest_block;
#pragma omp for schedule(dynamic)
    for (std::ptrdiff_t task = 0; task < static_cast<std::ptrdiff_t>(first[heads]); ++task) {
      const auto t = static_cast<std::size_t>(task);
      const std::size_t h = static_cast<std::size_t>(std::upper_bound(first.begin(), first.end(), t) - first.begin()) - 1;
      const BlockLayout& layout = layout_of_head(layouts, h);
      const std::size_t qb = t - first[h], bq = layout.block_q, bk = layout.block_k;
      const std::size_t i0 = qb * bq, rows = std::min(bq, seq_q - i0);
      const float* kh = k.data() + h * seq_k * d;
      const float* vh = v.data() + h * seq_k * d_v;
      for (std::size_t r = 0; r < rows; ++r) {
        const float* qi = q.data() + (h * seq_q + i0 + r) * d;
        float m = kNegInf, l = 0.0f;
        std::fill(o, o + d_v, 0.0f);
        // Only the key blocks the layout lists for this query block.
        for (std::size_t b = layout.block_start[qb]; b < layout.block_start[qb + 1]; ++b) {
          const std::size_t k0 = std::size_t{layout.key_blocks[b]} * bk, cols = std::min(bk, seq_k - k0);
          // A partial block's row of its mask (1 = allowed); a full block has none.
          const std::uint8_t* allowed =
              layout.partial[b] < 0 ? nullptr
                                    : layout.masks.data() + static_cast<std::size_t>(layout.partial[b]) * bq * bk + r * bk;
          // s_c = scale q_i . k_{k0 + c} for the keys the block allows row i; -inf for the others.
          float block_max = kNegInf;
          for (std::size_t c = 0; c < cols; ++c) {
            if (allowed != nullptr && allowed[c] == 0) {
              s[c] = kNegInf;
              continue;
            }
            const float* kc = kh + (k0 + c) * d;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (std::size_t e = 0; e < d; ++e) dot += qi[e] * kc[e];
            s[c] = scale * dot;
            block_max = std::max(block_max, s[c]);
          }
          if (block_max == kNegInf) continue;  // the mask hides the whole block from this row
          // m' = max(m, max_c s_c); l and O~ rescaled by e^{m - m'} (0 before the first key).
          const float m_new = std::max(m, block_max);
          const float correction = m == kNegInf ? 0.0f : std::exp(m - m_new);
          float sum = l * correction;
#pragma omp simd
          for (std::size_t e = 0; e < d_v; ++e) o[e] *= correction;
          // p_c = e^{s_c - m'};  l' = sum + sum_c p_c;  O~' += p_c v_c, one contiguous axpy per key.
          for (std::size_t c = 0; c < cols; ++c) {
            if (s[c] == kNegInf) continue;
            const float p = std::exp(s[c] - m_new);
            sum += p;
            const float* vc = vh + (k0 + c) * d_v;
#pragma omp simd
            for (std::size_t e = 0; e < d_v; ++e) o[e] += p * vc[e];
          }
          l = sum;
          m = m_new;
        }
        write_rows(result, h, i0 + r, 1, o, d_v, &m, &l);
      }
    }
  }
  return result;
}

// ---------------------------------------------------------------------------------------- v2

namespace {

using detail::FloatBatch;
using detail::kLanes;

constexpr std::size_t kRowGroup = 64;  // query rows per task: bounds the score and output tiles
constexpr std::size_t kChunk = 64;     // keys per score tile: whole micro-kernel blocks
static_assert(kChunk % detail::kTileCols == 0, "a score tile is a whole number of micro-kernel blocks");
static_assert(kWindowTile == kChunk && kWindowTile == kRowGroup, "the window kernel's tiles are v2's");

// K and V packed once per call, shared by every task of a head. K^T of head h is [d, ldk]: key j
// of row e at kt[(h d + e) ldk + j], so the score micro-kernel loads contiguous keys from any
// first key, and a tile may start anywhere (a block of a layout, a window's range). ldk leaves
// kChunk zero columns after the last key (a tile's padding reads them) and is an odd number of
// 64-byte lines, so the d rows a tile reads fall in different cache sets. V is [seq_k, dv_pad]
// (dv_pad a multiple of the micro-kernel width): the input itself when d_v already is one.
class PackedKeys {
 public:
  PackedKeys(const Tensor3& k, const Tensor3& v)
      : heads_(k.shape()[0]), seq_k_(k.shape()[1]), d_(k.shape()[2]), d_v_(v.shape()[2]),
        dv_pad_(round_up(d_v_, detail::kTileCols)), ldk_(round_up(seq_k_ + kChunk, 16)) {
    if ((ldk_ / 16) % 2 == 0) ldk_ += 16;
    kt_.assign(heads_ * d_ * ldk_, 0.0f);
    // Transposed one block of 64 keys at a time: contiguous reads of k, 64 rows of writes.
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t t = 0; t < static_cast<std::ptrdiff_t>(heads_ * ((seq_k_ + 63) / 64)); ++t) {
      const std::size_t blocks = (seq_k_ + 63) / 64, h = static_cast<std::size_t>(t) / blocks;
      const std::size_t j0 = (static_cast<std::size_t>(t) % blocks) * 64, j1 = std::min(seq_k_, j0 + 64);
      float* kt = kt_.data() + h * d_ * ldk_;
      for (std::size_t j = j0; j < j1; ++j) {
        const float* krow = k.data() + (h * seq_k_ + j) * d_;
        for (std::size_t e = 0; e < d_; ++e) kt[e * ldk_ + j] = krow[e];
      }
    }
    if (dv_pad_ == d_v_) {
      v_ = v.data();
      return;
    }
    vp_.assign(heads_ * seq_k_ * dv_pad_, 0.0f);
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t row = 0; row < static_cast<std::ptrdiff_t>(heads_ * seq_k_); ++row) {
      const float* vrow = v.data() + static_cast<std::size_t>(row) * d_v_;
      std::copy(vrow, vrow + d_v_, vp_.data() + static_cast<std::size_t>(row) * dv_pad_);
    }
    v_ = vp_.data();
  }
  std::size_t ldk() const { return ldk_; }
  std::size_t dv_pad() const { return dv_pad_; }
  const float* kt(std::size_t h) const { return kt_.data() + h * d_ * ldk_; }  ///< K^T of head h, [d, ldk]
  const float* v(std::size_t h) const { return v_ + h * seq_k_ * dv_pad_; }     ///< V of head h, [seq_k, dv_pad]

 private:
  std::size_t heads_, seq_k_, d_, d_v_, dv_pad_, ldk_;
  std::vector<float> kt_, vp_;
  const float* v_ = nullptr;
};

// One thread's online-softmax state for a group of up to kRowGroup query rows: per row chapter
// 04's running maximum m, sum l and output accumulator O~ ([kRowGroup, o_ld]), and the score tile
// S ([kRowGroup, s_ld]), all in a slice of a buffer allocated before the threads start (an
// allocation that fails inside an OpenMP region could not be reported as an exception). Keys are
// folded in one tile at a time: v2 on the micro-kernels (fold_packed), v3 by SGEMM (fold_blas).
class RowGroup {
 public:
  static std::size_t floats(std::size_t s_ld, std::size_t o_ld) { return kRowGroup * (s_ld + o_ld + 2); }
  RowGroup(float* scratch, std::size_t s_ld, std::size_t o_ld)
      : s_ld_(s_ld), o_ld_(o_ld), s_(scratch), o_(s_ + kRowGroup * s_ld), m_(o_ + kRowGroup * o_ld), l_(m_ + kRowGroup) {}

  // Starts rows [i0, i0 + rows) of head h: m = -inf, l = 0, O~ = 0.
  void start(const Tensor3& q, std::size_t h, std::size_t i0, std::size_t rows) {
    const std::size_t seq_q = q.shape()[1], d = q.shape()[2];
    q_rows_ = q.data() + (h * seq_q + i0) * d;
    d_ = d;
    h_ = h;
    i0_ = i0;
    rows_ = rows;
    std::fill(m_, m_ + rows, kNegInf);
    std::fill(l_, l_ + rows, 0.0f);
    std::fill(o_, o_ + rows * o_ld_, 0.0f);
  }

  // v2: folds keys [c0, c0 + cols) (cols <= kChunk) into the state, from K^T packed. `hide(r, srow)`
  // sets to -inf the scores srow[0, cols) that row r may not see (the layout's mask, the window's
  // edges).
  template <class Hide>
  void fold_packed(const PackedKeys& kv, std::size_t c0, std::size_t cols, float scale, Hide hide) {
    // S = scale Q K^T over a whole tile of kChunk keys (micro-kernel); the columns past `cols`
    // belong to other keys or to the zero padding, and become -inf below.
    detail::score_tile(q_rows_, d_, kv.kt(h_) + c0, kv.ldk(), s_, s_ld_, rows_, kChunk, scale);
    for (std::size_t r = 0; r < rows_; ++r) {
      float* srow = s_ + r * s_ld_;
      hide(r, srow);
      std::fill(srow + cols, srow + kChunk, kNegInf);
      detail::online_softmax_row(srow, kChunk, m_[r], l_[r], o_ + r * o_ld_, o_ld_);
    }
    // O~ += P~ V for the chunk's keys (micro-kernel).
    detail::accumulate_pv(s_, s_ld_, kv.v(h_) + c0 * kv.dv_pad(), kv.dv_pad(), o_, rows_, cols);
  }

  // v3: the same for keys [c0, c0 + cols) of head h (cols <= s_ld), both products by OpenBLAS SGEMM
  // on K and V where they lie: the keys of a run are consecutive rows of K ([seq_k, d]) and V.
  template <class Hide>
  void fold_blas(const Tensor3& k, const Tensor3& v, std::size_t c0, std::size_t cols, float scale, Hide hide) {
    const std::size_t seq_k = k.shape()[1], d_v = v.shape()[2];
    // S = scale Q K^T, [rows, cols]
    detail::sgemm(rows_, cols, d_, scale, q_rows_, d_, k.data() + (h_ * seq_k + c0) * d_, d_, true, 0.0f, s_, s_ld_);
    const std::size_t width = round_up(cols, kLanes);
    for (std::size_t r = 0; r < rows_; ++r) {
      float* srow = s_ + r * s_ld_;
      hide(r, srow);
      std::fill(srow + cols, srow + width, kNegInf);
      // chapter 04's online-softmax step on the row (hidden entries -inf)
      detail::online_softmax_row(srow, width, m_[r], l_[r], o_ + r * o_ld_, o_ld_);
    }
    // O~ += P~ V, [rows, d_v] (O~ was rescaled row by row above)
    detail::sgemm(rows_, d_v, cols, 1.0f, s_, s_ld_, v.data() + (h_ * seq_k + c0) * d_v, d_v, false, 1.0f, o_, o_ld_);
  }

  // O = O~ / l and L = m + ln l into the result.
  void finish(FlashOutput& result) const { write_rows(result, h_, i0_, rows_, o_, o_ld_, m_, l_); }

 private:

  std::size_t s_ld_, o_ld_;
  float *s_, *o_, *m_, *l_;
  const float* q_rows_ = nullptr;
  std::size_t d_ = 0, h_ = 0, i0_ = 0, rows_ = 0;
};

// Keeps every score of a tile: a full block, or a tile inside every row's window.
constexpr auto kHideNothing = [](std::size_t, float*) {};

}  // namespace

namespace {

// The tasks of v2 and v3: (head, query block, group of at most kRowGroup of its rows), so that a
// long query block (block_q > 64) neither needs a larger tile nor runs on one thread.
struct RowTask {
  std::size_t h, qb, i0, rows;
};
std::vector<RowTask> row_tasks(const HeadLayouts& layouts, std::size_t heads, std::size_t seq_q) {
  std::vector<RowTask> tasks;
  for (std::size_t h = 0; h < heads; ++h) {
    const BlockLayout& layout = layout_of_head(layouts, h);
    for (std::size_t qb = 0; qb < layout.query_blocks(); ++qb) {
      const std::size_t end = std::min(seq_q, (qb + 1) * layout.block_q);
      for (std::size_t i0 = qb * layout.block_q; i0 < end; i0 += kRowGroup)
        tasks.push_back({h, qb, i0, std::min(kRowGroup, end - i0)});
    }
  }
  return tasks;
}

// Hides, in row r of a tile whose first key is `first_key`, the keys that a partial block's mask
// forbids: the block's keys [k0, k0 + cols), the mask's row `row` (1 = allowed).
// A mask row is mostly long runs of ones or zeros (a window's edge, a pattern's stripes): eight
// bytes at a time, a run of eight ones costs one comparison and eight zeros one fill.
void hide_by_mask(float* srow, std::size_t first_key, std::size_t k0, std::size_t cols, const std::uint8_t* row) {
  float* s = srow + (k0 - first_key);
  constexpr std::uint64_t kAllowed8 = 0x0101010101010101ULL;
  std::size_t c = 0;
  for (; c + 8 <= cols; c += 8) {
    std::uint64_t bytes;
    std::memcpy(&bytes, row + c, 8);
    if (bytes == kAllowed8) continue;
    if (bytes == 0) {
      std::fill(s + c, s + c + 8, kNegInf);
      continue;
    }
    for (std::size_t e = c; e < c + 8; ++e) s[e] = row[e] != 0 ? s[e] : kNegInf;
  }
  for (; c < cols; ++c) s[c] = row[c] != 0 ? s[c] : kNegInf;
}

// The mask row of query row `row` (inside its block) in block entry b of a layout; nullptr for a
// full block.
const std::uint8_t* mask_row(const BlockLayout& layout, std::size_t b, std::size_t row) {
  if (layout.partial[b] < 0) return nullptr;
  return layout.masks.data() + (static_cast<std::size_t>(layout.partial[b]) * layout.block_q + row) * layout.block_k;
}

}  // namespace

FlashOutput block_sparse_attention_v2(const Tensor3& q, const Tensor3& k, const Tensor3& v, const HeadLayouts& layouts,
                                      std::optional<double> scale_option) {
  const float scale = validate_block_sparse(q, k, v, layouts, scale_option);
  const std::size_t heads = q.shape()[0], seq_q = q.shape()[1], seq_k = k.shape()[1];
  FlashOutput result = empty_output(q, v);
  count_tiles(layouts, heads, result);
  const PackedKeys kv(k, v);
  const std::vector<RowTask> tasks = row_tasks(layouts, heads, seq_q);
  const std::size_t per_thread = RowGroup::floats(kChunk, kv.dv_pad());
  std::vector<float> scratch(static_cast<std::size_t>(omp_get_max_threads()) * per_thread);

#pragma omp parallel
  {
    RowGroup group(scratch.data() + static_cast<std::size_t>(omp_get_thread_num()) * per_thread, kChunk, kv.dv_pad());
#pragma omp for schedule(dynamic)
    for (std::ptrdiff_t t = 0; t < static_cast<std::ptrdiff_t>(tasks.size()); ++t) {
      const RowTask& task = tasks[static_cast<std::size_t>(t)];
      const BlockLayout& layout = layout_of_head(layouts, task.h);
      const std::size_t bk = layout.block_k;
      const std::size_t first_row = task.i0 - task.qb * layout.block_q;  // the group's first row inside its block
      group.start(q, task.h, task.i0, task.rows);
      // Only the listed key blocks. Consecutive full blocks form one run of keys, cut into
      // chunks of kChunk: with blocks narrower than a chunk, no score tile is mostly padding.
      std::size_t b = layout.block_start[task.qb];
      const std::size_t b_end = layout.block_start[task.qb + 1];
      while (b < b_end) {
        const std::size_t k0 = std::size_t{layout.key_blocks[b]} * bk;
        if (layout.partial[b] >= 0) {
          // A partial block: its mask's zeros become -inf scores.
          const std::size_t cols = std::min(bk, seq_k - k0);
          for (std::size_t c0 = 0; c0 < cols; c0 += kChunk) {
            const std::size_t chunk = std::min(kChunk, cols - c0);
            group.fold_packed(kv, k0 + c0, chunk, scale, [&](std::size_t r, float* srow) {
              hide_by_mask(srow, k0 + c0, k0 + c0, chunk, mask_row(layout, b, first_row + r) + c0);
            });
          }
          ++b;
          continue;
        }
        std::size_t end_block = b + 1;
        while (end_block < b_end && layout.partial[end_block] < 0 &&
               layout.key_blocks[end_block] == layout.key_blocks[end_block - 1] + 1)
          ++end_block;
        const std::size_t k1 = std::min(seq_k, (std::size_t{layout.key_blocks[end_block - 1]} + 1) * bk);
        for (std::size_t c0 = k0; c0 < k1; c0 += kChunk)
          group.fold_packed(kv, c0, std::min(kChunk, k1 - c0), scale, kHideNothing);
        b = end_block;
      }
      group.finish(result);
    }
  }
  return result;
}

// ---------------------------------------------------------------------------------------- v3

namespace {

// Keys per SGEMM in v3: a run of consecutive key blocks (or a slice of a wider block) up to this
// long; the score tile is then at most 64 x 1024 floats (256 KiB, within a core's L2 with the run's
// K and V).
constexpr std::size_t kRunKeys = 1024;
// The score tile's row stride: a whole number of SIMD widths, not a multiple of 4 KiB (rows at a
// power-of-two stride would compete for the same cache sets).
constexpr std::size_t kRunLd = kRunKeys + 16;

// The OpenMP region with OpenBLAS single-threaded inside (each thread calls its own SGEMMs), or
// as it is when there is one thread.
template <class Body>
void with_single_threaded_blas(Body body) {
  if (omp_get_max_threads() > 1) {
    detail::SingleThreadedBlas single;
    body();
  } else {
    body();
  }
}

}  // namespace

FlashOutput block_sparse_attention_v3(const Tensor3& q, const Tensor3& k, const Tensor3& v, const HeadLayouts& layouts,
                                      std::optional<double> scale_option) {
  const float scale = validate_block_sparse(q, k, v, layouts, scale_option);
  const std::size_t heads = q.shape()[0], seq_q = q.shape()[1], seq_k = k.shape()[1], d_v = v.shape()[2];
  FlashOutput result = empty_output(q, v);
  count_tiles(layouts, heads, result);
  const std::vector<RowTask> tasks = row_tasks(layouts, heads, seq_q);
  const std::size_t per_thread = RowGroup::floats(kRunLd, d_v);
  std::vector<float> scratch(static_cast<std::size_t>(omp_get_max_threads()) * per_thread);

  with_single_threaded_blas([&] {
#pragma omp parallel
    {
      RowGroup group(scratch.data() + static_cast<std::size_t>(omp_get_thread_num()) * per_thread, kRunLd, d_v);
#pragma omp for schedule(dynamic)
      for (std::ptrdiff_t t = 0; t < static_cast<std::ptrdiff_t>(tasks.size()); ++t) {
        const RowTask& task = tasks[static_cast<std::size_t>(t)];
        const BlockLayout& layout = layout_of_head(layouts, task.h);
        const std::size_t bk = layout.block_k;
        const std::size_t first_row = task.i0 - task.qb * layout.block_q;
        const auto key_block = [&](std::size_t b) { return std::size_t{layout.key_blocks[b]}; };
        group.start(q, task.h, task.i0, task.rows);
        std::size_t b = layout.block_start[task.qb];
        const std::size_t b_end = layout.block_start[task.qb + 1];
        while (b < b_end) {
          const std::size_t k0 = key_block(b) * bk;
          if (bk > kRunKeys) {
            // A block wider than a run: its keys in slices of kRunKeys.
            const std::size_t cols = std::min(bk, seq_k - k0);
            for (std::size_t c0 = 0; c0 < cols; c0 += kRunKeys) {
              const std::size_t slice = std::min(kRunKeys, cols - c0);
              if (layout.partial[b] < 0) {
                group.fold_blas(k, v, k0 + c0, slice, scale, kHideNothing);
              } else {
                group.fold_blas(k, v, k0 + c0, slice, scale, [&](std::size_t r, float* srow) {
                  hide_by_mask(srow, k0 + c0, k0 + c0, slice, mask_row(layout, b, first_row + r) + c0);
                });
              }
            }
            ++b;
            continue;
          }
          // A run: blocks b .. end_block - 1 with consecutive indices, at most kRunKeys keys. Its keys
          // are consecutive rows of K and V: one SGEMM each for S and for P V; the partial blocks
          // of the run hide their masked entries.
          std::size_t end_block = b + 1;
          bool partial = layout.partial[b] >= 0;
          while (end_block < b_end && key_block(end_block) == key_block(end_block - 1) + 1 &&
                 (key_block(end_block) + 1) * bk - k0 <= kRunKeys) {
            partial = partial || layout.partial[end_block] >= 0;
            ++end_block;
          }
          const std::size_t k1 = std::min(seq_k, (key_block(end_block - 1) + 1) * bk);
          if (!partial) {
            group.fold_blas(k, v, k0, k1 - k0, scale, kHideNothing);
          } else {
            group.fold_blas(k, v, k0, k1 - k0, scale, [&](std::size_t r, float* srow) {
              for (std::size_t e = b; e < end_block; ++e)
                if (const std::uint8_t* row = mask_row(layout, e, first_row + r))
                  hide_by_mask(srow, k0, key_block(e) * bk, std::min(bk, seq_k - key_block(e) * bk), row);
            });
          }
          b = end_block;
        }
        group.finish(result);
      }
    }
  });
  return result;
}

// ------------------------------------------------------------------------ the sliding window

FlashOutput sliding_window_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, SlidingWindow window,
                                     std::optional<double> scale_option) {
  const float scale = validate_window(q, k, v, window, scale_option);
  const std::size_t heads = q.shape()[0], seq_q = q.shape()[1], seq_k = k.shape()[1], d_v = v.shape()[2];
  const AttentionMask mask{.window = window};
  const std::size_t q_tiles = (seq_q + kWindowTile - 1) / kWindowTile, k_tiles = (seq_k + kWindowTile - 1) / kWindowTile;
  FlashOutput result = empty_output(q, v);
  const std::size_t per_thread = RowGroup::floats(kRunLd, d_v);
  std::vector<float> scratch(static_cast<std::size_t>(omp_get_max_threads()) * per_thread);
  std::size_t computed = 0, skipped = 0;

  with_single_threaded_blas([&] {
#pragma omp parallel reduction(+ : computed, skipped)
    {
      RowGroup group(scratch.data() + static_cast<std::size_t>(omp_get_thread_num()) * per_thread, kRunLd, d_v);
#pragma omp for schedule(dynamic)
      for (std::ptrdiff_t t = 0; t < static_cast<std::ptrdiff_t>(heads * q_tiles); ++t) {
        const std::size_t h = static_cast<std::size_t>(t) / q_tiles, i0 = (static_cast<std::size_t>(t) % q_tiles) * kWindowTile;
        const std::size_t rows = std::min(kWindowTile, seq_q - i0);
        group.start(q, h, i0, rows);
        // The keys some row of the tile sees, [i0' - w_l, (i0 + rows - 1)' + w_r] within [0, n_k):
        // only the key tiles that overlap them, [first, end).
        const IndexRange keys = mask.key_range_of_rows(i0, i0 + rows, seq_q, seq_k);
        const std::size_t first = keys.begin / kWindowTile;
        const std::size_t end = keys.empty() ? first : (keys.end + kWindowTile - 1) / kWindowTile;
        computed += end - first;
        skipped += k_tiles - (end - first);
        // Row i sees [i' - w_l, i' + w_r]; both ends grow with i.
        IndexRange row_keys[kWindowTile];
        for (std::size_t r = 0; r < rows; ++r) row_keys[r] = mask.key_range(i0 + r, seq_q, seq_k);
        // Those tiles' keys in runs of at most kRunKeys (whole tiles), each row's keys outside its
        // range hidden as -inf scores.
        const std::size_t span_end = std::min(seq_k, end * kWindowTile);
        for (std::size_t c0 = first * kWindowTile; c0 < span_end; c0 += kRunKeys) {
          const std::size_t cols = std::min(kRunKeys, span_end - c0);
          group.fold_blas(k, v, c0, cols, scale, [&](std::size_t r, float* srow) {
            const std::size_t begin = std::clamp(row_keys[r].begin, c0, c0 + cols) - c0;
            const std::size_t stop = std::clamp(row_keys[r].end, c0 + begin, c0 + cols) - c0;
            std::fill(srow, srow + begin, kNegInf);
            std::fill(srow + stop, srow + cols, kNegInf);
          });
        }
        group.finish(result);
      }
    }
  });
  result.tiles_computed = computed;
  result.tiles_skipped = skipped;
  return result;
}

// ---------------------------------------------------------------------------------- versions

const std::vector<BlockSparseVariant>& block_sparse_variants() {
  static const std::vector<BlockSparseVariant> variants = {
      {"v1", "the reference's loops in float, one row at a time, over the listed blocks only; threads over (head, query block)",
       block_sparse_attention_v1},
      {"v2", "the tile products on chapter 04's register-blocked micro-kernels, K packed transposed once per head, "
             "masks as -inf scores, runs of full blocks in chunks of 64 keys",
       block_sparse_attention_v2},
      {"v3", "both products as OpenBLAS SGEMM calls on runs of consecutive key blocks, read from K and V where they "
             "lie (no packing), one softmax pass per run",
       block_sparse_attention_v3},
  };
  return variants;
}

FlashOutput block_sparse_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const HeadLayouts& layouts,
                                   std::optional<double> scale) {
  return block_sparse_variants().back().function(q, k, v, layouts, scale);
}

}  // namespace tvlab::opt
