#pragma once
// The work item of split-K, GQA-aware flash-decoding (Dao et al., 2023) and the merge of its
// partial softmax states, shared by the decode step over a contiguous cache (gqa_decode.cpp, v2)
// and over a paged one (paged_decode.cpp). A work item is (kv head, split of the positions): it
// reads the kv head's keys and values of its split once, in blocks of B positions, for all h/g
// query heads of the group. Where a block's positions lie in memory is the caller's business: it
// hands them over as runs of consecutive positions stored one after the other (the whole block for
// a contiguous cache, one run per page for a paged one); the arithmetic is the same.

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "tvlab/opt/online_softmax.hpp"

#include "flash_tiles.hpp"

namespace tvlab::opt::detail {

inline constexpr float kDecodeNegInf = -std::numeric_limits<float>::infinity();

// Positions per block of a work item. With dot products: 512, so that keys and values are read
// in long runs (256 KiB each at d = 128) that stay in L2 between the scores and P V. With the
// micro-kernel: 64, so that the transposed keys [d, 64] (32 KiB at d = 128) stay in L1.
inline constexpr std::size_t kDecodeBlockDot = 512, kDecodeBlockMicroKernel = 64;
static_assert(kDecodeBlockDot % kTileCols == 0 && kDecodeBlockMicroKernel % kTileCols == 0,
              "a block is a whole number of micro-kernel widths");

// From this many query rows per kv head on, the scores go through the register-blocked micro-kernel,
// whose transposition of each key block costs about as much as 16 rows' dot products save
// (measured at 32K positions, 2 threads: 4 rows 2.4x faster with dot products, 32 rows (MQA)
// 1.25x faster with the micro-kernel).
inline constexpr std::size_t kDecodeMicroKernelRows = 16;

inline std::size_t round_up(std::size_t x, std::size_t multiple) { return (x + multiple - 1) / multiple * multiple; }

// q . k over d floats (vectorised by the compiler).
inline float dot(const float* q, const float* k, std::size_t d) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (std::size_t e = 0; e < d; ++e) sum += q[e] * k[e];
  return sum;
}

// S[r][c] = scale q_r . k_c for r < rows, c < cols (q [rows, d], keys [cols, d], S [rows, lds]).
// Four keys at a time: a dot product is a chain of dependent FMAs (d / lanes of them, each waiting
// for the last), so four independent chains keep the FMA units busy; the four keys (4 d floats)
// and the group's query rows stay in L1 while every row uses them.
inline void scores_by_dot_products(const float* q, std::size_t rows, const float* keys, std::size_t cols,
                                   std::size_t d, float scale, float* s, std::size_t lds) {
  const std::size_t d_vec = d / kLanes * kLanes;  // the rest, d % lanes, in scalar
  std::size_t c = 0;
  for (; c + 4 <= cols; c += 4)
    for (std::size_t r = 0; r < rows; ++r) {
      const float* qr = q + r * d;
      FloatBatch acc[4] = {};
      for (std::size_t e = 0; e < d_vec; e += kLanes) {
        const FloatBatch qe = FloatBatch::load_unaligned(qr + e);
        for (std::size_t x = 0; x < 4; ++x) acc[x] = xsimd::fma(qe, FloatBatch::load_unaligned(keys + (c + x) * d + e), acc[x]);
      }
      for (std::size_t x = 0; x < 4; ++x) {
        float sum = xsimd::hadd(acc[x]);
        for (std::size_t e = d_vec; e < d; ++e) sum += qr[e] * keys[(c + x) * d + e];
        s[r * lds + c + x] = scale * sum;
      }
    }
  for (; c < cols; ++c)  // the last cols % 4 keys, one at a time
    for (std::size_t r = 0; r < rows; ++r) s[r * lds + c] = scale * dot(q + r * d, keys + c * d, d);
}

// The sizes of a work item: h/g query rows of dimension d, values of d_v (padded to dv_pad, a
// whole number of micro-kernel widths), blocks of `block` positions.
struct DecodeSplitShape {
  std::size_t group, d, d_v, dv_pad, block;
  float scale;
  bool micro_kernel() const { return group >= kDecodeMicroKernelRows; }
  bool values_padded() const { return dv_pad != d_v; }
};

inline DecodeSplitShape decode_split_shape(std::size_t group, std::size_t d, std::size_t d_v, double scale) {
  const bool micro_kernel = group >= kDecodeMicroKernelRows;
  return {group, d, d_v, round_up(d_v, kTileCols), micro_kernel ? kDecodeBlockMicroKernel : kDecodeBlockDot,
          static_cast<float>(scale)};
}

// Per thread: the scores of the group [h/g, block], the block's keys transposed [d, block] (for
// the micro-kernel), and a run of values padded to dv_pad when d_v is not a whole number of
// register widths (the padding stays 0).
struct DecodeWorkspace {
  std::vector<float> s, kt, v_block;
  explicit DecodeWorkspace(const DecodeSplitShape& shape)
      : s(shape.group * shape.block),
        kt(shape.micro_kernel() ? shape.d * shape.block : 0, 0.0f),
        v_block(shape.values_padded() ? shape.block * shape.dv_pad : 0, 0.0f) {}
};

// Consecutive positions whose keys `[count, d]` and values `[count, d_v]` lie one after the other.
struct PositionRun {
  const float* keys;
  const float* values;
  std::size_t count;
};

// The partial softmax state of every (split, query head): m, l and the unnormalised output
// O~ [dv_pad]. Split-major, so that a group's h/g rows are contiguous as the micro-kernel wants them.
struct DecodePartials {
  std::size_t splits, heads, dv_pad;
  std::vector<float> m, l, o;
  DecodePartials(std::size_t splits_, std::size_t heads_, std::size_t dv_pad_)
      : splits(splits_), heads(heads_), dv_pad(dv_pad_), m(splits_ * heads_, kDecodeNegInf),
        l(splits_ * heads_, 0.0f), o(splits_ * heads_ * dv_pad_, 0.0f) {}
  std::size_t row(std::size_t split, std::size_t head) const { return split * heads + head; }
};

// Which half of the runs a pass of a work item reads: the keys (scores) or the values (P V).
enum class RunPass { keys, values };

// One work item: the group's query rows qg [h/g, d] over positions [begin, end) of one kv head,
// into the partial states m, l [h/g] and o [h/g, dv_pad] (which start at -inf, 0, 0).
// runs_of(c0, cols, pass, visit) calls visit(offset, PositionRun) for runs that cover positions
// [c0, c0 + cols) in order, offset being the run's first position minus c0; `pass` says which
// half of each run the visit reads.
template <class RunsOf>
void decode_split(const DecodeSplitShape& shape, const float* qg, std::size_t begin, std::size_t end,
                  const RunsOf& runs_of, float* m, float* l, float* o, DecodeWorkspace& ws) {
  const std::size_t group = shape.group, d = shape.d, d_v = shape.d_v, dv_pad = shape.dv_pad, block = shape.block;
  float* s = ws.s.data();
  for (std::size_t c0 = begin; c0 < end; c0 += block) {
    const std::size_t cols = std::min(block, end - c0);
    // S[r][c] = scale q_r . k_{c0+c} for the h/g rows of the group.
    if (shape.micro_kernel()) {
      // [h/g, d] x [d, block] on chapter 04's micro-kernel: the block's keys transposed to
      // kt [d, block] (the columns past `cols` keep earlier finite keys: their scores are
      // replaced by -inf below), then four query rows share every load of K^T.
      runs_of(c0, cols, RunPass::keys, [&](std::size_t offset, const PositionRun& run) {
        for (std::size_t c = 0; c < run.count; ++c) {
          const float* kc = run.keys + c * d;
          for (std::size_t e = 0; e < d; ++e) ws.kt[e * block + offset + c] = kc[e];
        }
      });
      score_tile(qg, d, ws.kt.data(), block, s, block, group, block, shape.scale);
    } else {
      runs_of(c0, cols, RunPass::keys, [&](std::size_t offset, const PositionRun& run) {
        scores_by_dot_products(qg, group, run.keys, run.count, d, shape.scale, s + offset, block);
      });
    }
    // Per query row: columns past the split count as -inf; m' = max(m, rowmax S), P~ = e^{S - m'},
    // l' = e^{m - m'} l + rowsum P~, O~ row *= e^{m - m'} (chapter 04's step).
    for (std::size_t r = 0; r < group; ++r) {
      float* srow = s + r * block;
      std::fill(srow + cols, srow + block, kDecodeNegInf);
      online_softmax_row(srow, block, m[r], l[r], o + r * dv_pad, dv_pad);
    }
    // O~ += P~ V: [h/g, count] x [count, d_v] per run, four query rows sharing every load of V.
    runs_of(c0, cols, RunPass::values, [&](std::size_t offset, const PositionRun& run) {
      const float* vb = run.values;
      if (shape.values_padded()) {
        for (std::size_t c = 0; c < run.count; ++c) std::copy_n(vb + c * d_v, d_v, ws.v_block.data() + c * dv_pad);
        vb = ws.v_block.data();
      }
      accumulate_pv(s + offset, block, vb, dv_pad, o, group, run.count);
    });
  }
}

// Merges the splits of each query head into its output out [h, d_v] and lse [h], as
// online_softmax_merge merges two softmax states:
// m = max_s m_s, l = sum_s e^{m_s - m} l_s, o = sum_s e^{m_s - m} O~_s / l, L = m + ln l.
// A worksharing loop: called inside the parallel region, its threads share the heads.
inline void merge_decode_splits(const DecodePartials& parts, std::size_t d_v, float* out, float* lse) {
#pragma omp for schedule(static)
  for (std::ptrdiff_t task = 0; task < static_cast<std::ptrdiff_t>(parts.heads); ++task) {
    const auto i = static_cast<std::size_t>(task);
    SoftmaxState total;
    for (std::size_t split = 0; split < parts.splits; ++split)
      total = online_softmax_merge(total, {parts.m[parts.row(split, i)], parts.l[parts.row(split, i)]});
    float* out_i = out + i * d_v;
    std::fill(out_i, out_i + d_v, 0.0f);
    for (std::size_t split = 0; split < parts.splits; ++split) {
      const auto weight = static_cast<float>(std::exp(parts.m[parts.row(split, i)] - total.max) / total.sum);
      const float* o = parts.o.data() + parts.row(split, i) * parts.dv_pad;
#pragma omp simd
      for (std::size_t e = 0; e < d_v; ++e) out_i[e] += weight * o[e];
    }
    lse[i] = static_cast<float>(total.max + std::log(total.sum));
  }
}

}  // namespace tvlab::opt::detail
