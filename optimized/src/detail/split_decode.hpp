#pragma once
// Split-K flash-decoding (chapter 05), written once for every KV cache the chapter decodes: float
// caches in either layout (gqa_decode.cpp, kv_layout_decode.cpp), paged ones (paged_attention.cpp)
// and caches of narrower numbers (bf16: bf16_kv_decode.cpp; INT8, INT4, FP8:
// quantized_kv_attention.cpp). The kernel asks a cache for a block of key rows and a block of value
// rows at a time, as floats; a float cache hands out a pointer into itself, a quantized cache
// dequantizes the block into a small per-thread buffer first. The scores, the online softmax, P V
// and the merge of the splits are the same for all of them. A cache with one scale per token
// (INT8 and FP8 E4M3 per token) may instead hand out its codes and scales (a CodeSource), which
// the kernels of code_kernels.hpp read without a buffer.

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "tvlab/opt/online_softmax.hpp"

#include "flash_tiles.hpp"

namespace tvlab::opt::detail {

/// How many positions ahead of the rows it computes on the kernel asks for rows: 64, 32 KiB ahead at
/// d = 128, so that the lines have arrived by the time the 64 positions before them are computed.
/// A multiple of 16, so that on a paged cache with pages of 16 the rows ahead lie in one page as
/// the rows requested do. Measured at 32K positions, GQA (g = 8), 2 threads: without these
/// prefetches a core alternates between waiting for memory and computing (15.9 ms); with them, 10.6
/// ms (16 to 128 positions ahead all within 5% of each other). The hardware prefetcher alone keeps
/// too few lines in flight once every byte is used in eight FMAs.
inline constexpr std::size_t kPrefetchDistance = 64;

/// Rows handed out by a cache: row c of the block at `rows + c * stride`; and, when the cache holds
/// them as stored floats, where the rows kPrefetchDistance positions later lie (row c's at
/// `ahead + c * stride`), for the kernel to prefetch; nullptr when they are past the positions
/// attended, or converted rather than read in place.
struct RowBlock {
  const float* rows;
  std::size_t stride;
  const float* ahead = nullptr;
};

/// Rows of codes handed out by a cache whose rows are \f$ \hat x_t = s_t\, c_t \f$ (one scale per
/// position): row c's codes at `codes + c * stride` (bytes; a code is 1 byte, or 2 for bf16), its
/// scale at `scales[c]` (nullptr: no scale, \f$ s_t = 1 \f$), and the codes kPrefetchDistance
/// positions later at `ahead + c * stride` (nullptr when past the positions attended). The kernels
/// of code_kernels.hpp read them without converting them into a buffer.
struct CodeBlock {
  const std::uint8_t* codes;
  std::size_t stride;
  const float* scales;
  const std::uint8_t* ahead = nullptr;
};

/// A cache that hands out its rows as codes (`code_rows(kv, first, count)`, a CodeBlock) rather than
/// floats; `Source::Codes` says how a chunk of codes becomes floats (code_kernels.hpp).
template <class Source>
concept CodeSource = requires { typename Source::Codes; };

// The kernels over codes, defined in code_kernels.hpp, which a file decoding a CodeSource includes.
template <class Codes>
void scores_from_codes(const float* q, std::size_t rows, const CodeBlock& keys, std::size_t cols, std::size_t d,
                       float scale, float* s, std::size_t lds);
template <class Codes>
void accumulate_pv_from_codes(const float* p, std::size_t lds, const CodeBlock& values, float* o, std::size_t rows,
                              std::size_t cols, std::size_t d_v, std::size_t ldo);

/// A float cache `[.., d]` whose head `kv` starts at `data + kv * head_stride` and whose
/// consecutive positions are `row_stride` floats apart: `[g, capacity, d]` has (capacity d, d),
/// `[capacity, g, d]` has (d, g d).
struct FloatRows {
  const float* data;
  std::size_t head_stride, row_stride, dim;
  std::size_t length;  ///< positions the step attends to: no row past them is prefetched

  /// Positions [first, first + count) of head kv, each readable over `width` >= dim floats: the
  /// cache itself, or (width > dim) the rows copied into `buffer` [count, width], whose padding the
  /// caller keeps at 0.
  RowBlock rows(std::size_t kv, std::size_t first, std::size_t count, std::size_t width, float* buffer) const {
    const float* start = data + kv * head_stride + first * row_stride;
    if (width == dim)
      return {start, row_stride, first + kPrefetchDistance + count <= length ? start + kPrefetchDistance * row_stride : nullptr};
    for (std::size_t c = 0; c < count; ++c) std::copy_n(start + c * row_stride, dim, buffer + c * width);
    return {buffer, width};
  }
  /// Whether `rows` needs its buffer for rows of `width` floats.
  bool needs_buffer(std::size_t width) const { return width != dim; }
};

/// The sizes of one split-K decode step.
struct SplitDecodeShape {
  std::size_t heads;     ///< h, query heads
  std::size_t kv_heads;  ///< g
  std::size_t group;     ///< h / g, query heads per kv head
  std::size_t length;    ///< positions attended, >= 1
  std::size_t d, d_v;    ///< key and value head sizes
  float scale;
  std::size_t splits;  ///< ranges of positions, in [1, length]
  std::size_t block;   ///< positions per online softmax step, a multiple of kLanes
  /// Requests to the cache never cross a multiple of `piece` positions: `block` for a contiguous
  /// float cache, whose rows are read in place; fewer for a cache that converts each request into a
  /// buffer (so that the buffer stays in L1 while the cache is still read in runs of `block`
  /// positions, and a request covers whole quantization groups); the page size for a paged cache
  /// (so that a request lies in one page).
  std::size_t piece;
  /// Kv heads one work item reads: 1, items (kv head, split), each reading one head's positions in
  /// runs of `block`; or all g, items (split), which take the g heads in turn at each block of
  /// positions. A paged pool `[num_blocks, g, b, d]` holds the pages of all g heads of a block
  /// together, so the second order reads each physical block as a few sequential runs instead of
  /// g pieces far apart in time (see paged_attention.cpp).
  std::size_t heads_per_item = 1;
};

inline std::size_t round_up(std::size_t x, std::size_t multiple) { return (x + multiple - 1) / multiple * multiple; }

/// S[r][c] = scale q_r . k_c for r < rows, c < cols (q [rows, d], key c at keys + c ldk, S [rows, lds]).
/// Four keys at a time: a dot product is a chain of dependent FMAs (d / lanes of them, each waiting
/// for the last), so four independent chains keep the FMA units busy; the four keys (4 d floats)
/// and the group's query rows stay in L1 while every row uses them.
inline void scores_by_dot_products(const float* q, std::size_t rows, const float* keys, std::size_t ldk,
                                   std::size_t cols, std::size_t d, float scale, float* s, std::size_t lds,
                                   const float* keys_ahead = nullptr) {
  const std::size_t d_vec = d / kLanes * kLanes;  // the rest, d % lanes, in scalar
  std::size_t c = 0;
  for (; c + 4 <= cols; c += 4)
    for (std::size_t r = 0; r < rows; ++r) {
      const float* qr = q + r * d;
      FloatBatch acc[4] = {};
      for (std::size_t e = 0; e < d_vec; e += kLanes) {
        const FloatBatch qe = FloatBatch::load_unaligned(qr + e);
        for (std::size_t x = 0; x < 4; ++x) {
          acc[x] = xsimd::fma(qe, FloatBatch::load_unaligned(keys + (c + x) * ldk + e), acc[x]);
          if (keys_ahead != nullptr && r == 0) prefetch_line(keys_ahead + (c + x) * ldk + e);  // the first row asks
        }
      }
      for (std::size_t x = 0; x < 4; ++x) {
        float sum = xsimd::hadd(acc[x]);
        for (std::size_t e = d_vec; e < d; ++e) sum += qr[e] * keys[(c + x) * ldk + e];
        s[r * lds + c + x] = scale * sum;
      }
    }
  for (; c < cols; ++c)  // the last cols % 4 keys, one at a time
    for (std::size_t r = 0; r < rows; ++r) {
      const float* qr = q + r * d;
      const float* kc = keys + c * ldk;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (std::size_t e = 0; e < d; ++e) sum += qr[e] * kc[e];
      s[r * lds + c] = scale * sum;
    }
}

/// Query rows that share every key load in scores_register_blocked.
inline constexpr std::size_t kBlockedRows = 4;
/// Keys per step of scores_register_blocked: its kBlockedRows x kBlockedKeys dot products fill
/// exactly one register of lanes when reduced (4 on AVX-512, 2 on AVX2).
inline constexpr std::size_t kBlockedKeys = kLanes >= kBlockedRows ? kLanes / kBlockedRows : 1;

/// Where xsimd::haddp puts the sum of each of its kLanes input registers: lane_of[i] is the lane
/// of the sum of register i. haddp is documented to return them in order (lane i), but some
/// versions' AVX-512 form permute them (xsimd 8.1 returns the order 0 1 4 5 2 3 6 7 8 9 12 13 ...);
/// asking it once, with register i holding the number i everywhere, makes the kernel right for
/// every version.
inline const std::array<std::size_t, kLanes>& haddp_lanes() {
  static const std::array<std::size_t, kLanes> lane_of = [] {
    FloatBatch rows[kLanes];
    for (std::size_t i = 0; i < kLanes; ++i) rows[i] = FloatBatch(static_cast<float>(i));
    alignas(64) float sums[kLanes];
    xsimd::haddp(rows).store_aligned(sums);  // lane j holds kLanes times the register summed there
    std::array<std::size_t, kLanes> lanes{};
    for (std::size_t j = 0; j < kLanes; ++j) lanes[static_cast<std::size_t>(sums[j]) / kLanes] = j;
    return lanes;
  }();
  return lane_of;
}

/// S[r][c] = scale q_r . k_c as scores_by_dot_products computes it, for a group of four or more
/// query rows, register-blocked: four query rows times kBlockedKeys keys at a time, so that every
/// key chunk loaded from the cache serves four rows and every query chunk serves kBlockedKeys keys
/// (one load per two FMAs instead of five per four). The 16 dot products (on AVX-512) end as 16
/// registers of partial sums, which one transposing reduction (xsimd::haddp: 15 shuffles and 15
/// adds) turns into one register holding the 16 scores, where a reduction per dot product would
/// take a shuffle tree each. Rows past a multiple of four and keys past a multiple of kBlockedKeys
/// go through scores_by_dot_products. It serves every group of four rows or more, MQA's 32 too:
/// there it is faster than transposing each block of keys for chapter 04's micro-kernel (measured at
/// 32K positions, 2 threads: 3.4-4.1 ms against 5.0-5.4 ms); at GQA's 4 rows, with the cache in L3,
/// it is 1.3x faster than scores_by_dot_products.
inline void scores_register_blocked(const float* q, std::size_t rows, const float* keys, std::size_t ldk,
                                    std::size_t cols, std::size_t d, float scale, float* s, std::size_t lds,
                                    const float* keys_ahead = nullptr) {
  constexpr std::size_t R = kBlockedRows, K = kBlockedKeys, tile = R * K;
  const std::size_t d_vec = d / kLanes * kLanes, rows_blocked = rows / R * R, cols_blocked = cols / K * K;
  if (tile != kLanes || d_vec != d) {  // a narrow register or a ragged d: the plain dot products
    scores_by_dot_products(q, rows, keys, ldk, cols, d, scale, s, lds, keys_ahead);
    return;
  }
  const std::array<std::size_t, kLanes>& lane_of = haddp_lanes();
  for (std::size_t r = 0; r < rows_blocked; r += R)
    for (std::size_t c = 0; c < cols_blocked; c += K) {
      // acc[i K + x] = lane-wise partial sums of q_{r+i} . k_{c+x}
      FloatBatch acc[tile] = {};
      for (std::size_t e = 0; e < d; e += kLanes) {
        FloatBatch k[K];
        for (std::size_t x = 0; x < K; ++x) {
          k[x] = FloatBatch::load_unaligned(keys + (c + x) * ldk + e);
          keep_in_register(k[x]);
          if (keys_ahead != nullptr && r == 0) prefetch_line(keys_ahead + (c + x) * ldk + e);  // the first rows ask
        }
        for (std::size_t i = 0; i < R; ++i) {
          FloatBatch qe = FloatBatch::load_unaligned(q + (r + i) * d + e);
          keep_in_register(qe);
          for (std::size_t x = 0; x < K; ++x) acc[i * K + x] = xsimd::fma(qe, k[x], acc[i * K + x]);
        }
      }
      // The reduction of register i K + x (at lane_of[i K + x]) is the whole dot product q_{r+i} . k_{c+x}.
      alignas(64) float dots[tile];
      (xsimd::haddp(acc) * FloatBatch(scale)).store_aligned(dots);
      for (std::size_t i = 0; i < R; ++i)
        for (std::size_t x = 0; x < K; ++x) s[(r + i) * lds + c + x] = dots[lane_of[i * K + x]];
    }
  // The rest: keys past cols_blocked for the blocked rows, then the rows past rows_blocked.
  if (cols_blocked < cols)
    scores_by_dot_products(q, rows_blocked, keys + cols_blocked * ldk, ldk, cols - cols_blocked, d, scale,
                           s + cols_blocked, lds, keys_ahead != nullptr ? keys_ahead + cols_blocked * ldk : nullptr);
  if (rows_blocked < rows)
    scores_by_dot_products(q + rows_blocked * d, rows - rows_blocked, keys, ldk, cols, d, scale,
                           s + rows_blocked * lds, lds);
}

/// Positions in the request that starts at position `first` with `left` positions of the block to
/// go: up to the next multiple of `piece`, \f$ \min(\text{piece} - \text{first} \bmod \text{piece}, \text{left}) \f$.
/// A split, and so a block, may begin anywhere; cutting at absolute multiples rather than every
/// `piece` positions from the block's start keeps each request inside one page of a paged cache
/// and inside whole quantization groups of a quantized one, at the cost of at most one more
/// request per block.
inline std::size_t request_length(std::size_t first, std::size_t left, std::size_t piece) {
  return std::min(piece - first % piece, left);
}

/// Query head i's output `out_i` [width] and lse from the partial softmax states of `splits` ranges
/// of positions (split-major: range r's state of head i at `r heads + i`, its unnormalised output
/// at `part_o + (r heads + i) ld_part`), merged as online_softmax_merge merges two states:
/// \f$ m = \max_r m_r \f$, \f$ \ell = \sum_r e^{m_r - m} \ell_r \f$, \f$ o = \sum_r e^{m_r - m} \tilde O_r / \ell \f$,
/// \f$ L = m + \ln \ell \f$. Every range holds a position, so each \f$ m_r \f$ is finite;
/// \f$ e^{m_r - m} \f$ underflows to 0 for a range far below the peak.
inline void merge_split_states(std::size_t i, std::size_t splits, std::size_t heads, const float* part_m,
                               const float* part_l, const float* part_o, std::size_t ld_part, std::size_t width,
                               float* out_i, float& lse_i) {
  SoftmaxState total;
  for (std::size_t r = 0; r < splits; ++r) total = online_softmax_merge(total, {part_m[r * heads + i], part_l[r * heads + i]});
  std::fill(out_i, out_i + width, 0.0f);
  for (std::size_t r = 0; r < splits; ++r) {
    const auto weight = static_cast<float>(std::exp(part_m[r * heads + i] - total.max) / total.sum);
    const float* o = part_o + (r * heads + i) * ld_part;
#pragma omp simd
    for (std::size_t e = 0; e < width; ++e) out_i[e] += weight * o[e];
  }
  lse_i = static_cast<float>(total.max + std::log(total.sum));
}

/// One decode step, split-K (Dao et al., 2023): threads take the work items (kv head, split of the
/// positions), or (split) over all kv heads when `shape.heads_per_item` is g; each kv head's keys
/// and values within a split are read once, `shape.block` positions at a time (requested
/// from the cache in requests that never cross a multiple of `shape.piece`), for all h/g
/// query heads of the group, and keeps per query head the online softmax's partial state
/// \f$ (m, \ell, \tilde O) \f$ over its split. The partials are then merged per query head:
/// \f$ m = \max_s m_s \f$, \f$ \ell = \sum_s e^{m_s - m} \ell_s \f$, \f$ o = \sum_s e^{m_s - m} \tilde O_s / \ell \f$,
/// \f$ L = m + \ln \ell \f$. q is `[h, d]`; writes out `[h, d_v]` and lse `[h]`.
/// `keys.rows(kv, first, count, d, buffer)` and `values.rows(kv, first, count, dv_pad, buffer)`
/// hand out blocks, and `needs_buffer(width)` says whether they need their buffer (see FloatRows);
/// dv_pad is d_v rounded up to kTileCols, and a value block must read 0 in its padding. A CodeSource
/// hands out codes and scales instead (`code_rows`), which code_kernels.hpp's kernels read directly.
template <class KeySource, class ValueSource>
void split_k_decode(const float* q, const SplitDecodeShape& shape, const KeySource& keys, const ValueSource& values,
                    float* out, float* lse) {
  constexpr float neg_inf = -std::numeric_limits<float>::infinity();
  const auto& [heads, kv_heads, group, n, d, d_v, scale, splits, block, piece, heads_per_item] = shape;
  // The micro-kernels work on whole register widths: values and accumulators padded to dv_pad.
  const std::size_t dv_pad = round_up(d_v, kTileCols);

  // The partial state of every (split, query head): m, l and the unnormalised output O~ [dv_pad].
  // Split-major, so that a group's h/g rows are contiguous as the micro-kernel wants them.
  std::vector<float> part_m(splits * heads, neg_inf), part_l(splits * heads, 0.0f), part_o(splits * heads * dv_pad, 0.0f);
  const auto items = static_cast<std::ptrdiff_t>(kv_heads / heads_per_item * splits);

#pragma omp parallel
  {
    // Per thread: the scores of the group [h/g, block], and the buffers a cache may fill with one
    // request's keys [piece, d] and values [piece, dv_pad] (their padding stays 0).
    std::vector<float> s(group * block);
    const std::size_t most = std::min(piece, block);  // positions in the longest request
    std::vector<float> k_buffer(keys.needs_buffer(d) ? most * d : 0, 0.0f);
    std::vector<float> v_buffer(values.needs_buffer(dv_pad) ? most * dv_pad : 0, 0.0f);
#pragma omp for schedule(dynamic)
    for (std::ptrdiff_t item = 0; item < items; ++item) {
      // Item = (heads first_kv .. first_kv + heads_per_item, split), in blocks of positions, and
      // within a block the item's heads in turn.
      const std::size_t first_kv = static_cast<std::size_t>(item) / splits * heads_per_item;
      const std::size_t split = static_cast<std::size_t>(item) % splits;
      const std::size_t begin = split * n / splits, end = (split + 1) * n / splits;
      for (std::size_t c0 = begin; c0 < end; c0 += block)
        for (std::size_t kv = first_kv; kv < first_kv + heads_per_item; ++kv) {
          // Positions [c0, c0 + cols) of kv head kv: the scores of the group's h/g query rows, the
          // online softmax's step, and P V into the split's partial state.
          const std::size_t cols = std::min(block, end - c0);
          const float* qg = q + kv * group * d;  // the group's h/g query rows [h/g, d]
          float* m = part_m.data() + split * heads + kv * group;
          float* l = part_l.data() + split * heads + kv * group;
          float* o = part_o.data() + (split * heads + kv * group) * dv_pad;
          // S[r][c] = scale q_r . k_{c0+c} for the h/g rows of the group, the keys requested in order,
          // each request ending at the next multiple of `piece` (request_length).
          for (std::size_t p0 = 0, count = 0; p0 < cols; p0 += count) {
            count = request_length(c0 + p0, cols - p0, piece);
            if constexpr (CodeSource<KeySource>) {  // the codes read in place, s_t applied to each dot product
              scores_from_codes<typename KeySource::Codes>(qg, group, keys.code_rows(kv, c0 + p0, count), count, d, scale,
                                                           s.data() + p0, block);
            } else {
              const RowBlock kb = keys.rows(kv, c0 + p0, count, d, k_buffer.data());
              scores_register_blocked(qg, group, kb.rows, kb.stride, count, d, scale, s.data() + p0, block, kb.ahead);
            }
          }
          // Per query row: columns past the split count as -inf; m' = max(m, rowmax S), P~ = e^{S - m'},
          // l' = e^{m - m'} l + rowsum P~, O~ row *= e^{m - m'} (chapter 04's step).
          for (std::size_t r = 0; r < group; ++r) {
            float* srow = s.data() + r * block;
            std::fill(srow + cols, srow + block, neg_inf);
            online_softmax_row(srow, block, m[r], l[r], o + r * dv_pad, dv_pad);
          }
          // O~ += P~ V_block: [h/g, cols] x [cols, d_v], four query rows sharing every load of V,
          // the values requested as the keys were.
          for (std::size_t p0 = 0, count = 0; p0 < cols; p0 += count) {
            count = request_length(c0 + p0, cols - p0, piece);
            if constexpr (CodeSource<ValueSource>) {  // the codes read in place, s_t folded into p_t
              accumulate_pv_from_codes<typename ValueSource::Codes>(s.data() + p0, block, values.code_rows(kv, c0 + p0, count),
                                                                    o, group, count, d_v, dv_pad);
            } else {
              const RowBlock vb = values.rows(kv, c0 + p0, count, dv_pad, v_buffer.data());
              accumulate_pv(s.data() + p0, block, vb.rows, vb.stride, o, group, count, dv_pad, vb.ahead);
            }
          }
        }
    }

    // Merge the splits of each query head.
#pragma omp for schedule(static)
    for (std::ptrdiff_t task = 0; task < static_cast<std::ptrdiff_t>(heads); ++task) {
      const auto i = static_cast<std::size_t>(task);
      merge_split_states(i, splits, heads, part_m.data(), part_l.data(), part_o.data(), dv_pad, d_v, out + i * d_v, lse[i]);
    }
  }
}

}  // namespace tvlab::opt::detail
