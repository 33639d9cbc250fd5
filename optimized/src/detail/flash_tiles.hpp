#pragma once
// The tile products of flash attention as register-blocked SIMD micro-kernels (xsimd: 16 floats
// per register with AVX-512, 8 with AVX2). Both keep a kRows x kVectors-register block of
// accumulators in registers (4 rows in v2 and the kernels of chapters 03 and 05, 6 in the forward
// v3 and the backward v4) and stream the other operand from L1. And the online softmax's step on
// one row of a score tile: v2's in base e (shared by the dense chapter 04 and sparse chapter 03
// kernels), v3's in base 2 with the polynomial 2^x of fast_exp.hpp.

#include <xsimd/xsimd.hpp>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "fast_exp.hpp"

namespace tvlab::opt::detail {

using FloatBatch = xsimd::batch<float>;
inline constexpr std::size_t kLanes = FloatBatch::size;
// Registers per row in a micro-kernel block: 6 x 4 accumulators + 4 loads + 1 broadcast fit
// AVX-512's 32 registers (4 x 4 leaves 11 unused); AVX2 has 16, so 4 or 6 x 2 there.
// (score_rows' running row maxima do not fit beside them and may live on the stack: they are
// touched only as each block of columns leaves the registers.)
inline constexpr std::size_t kVectors = kLanes >= 16 ? 4 : 2;
inline constexpr std::size_t kTileCols = kVectors * kLanes;  // columns per micro-kernel block

/// Keeps a loaded register in a register. A micro-kernel loads each operand once to use it in
/// several FMAs; GCC's cost model instead folds the load into every FMA as a memory operand
/// (`vfmadd231ps (mem), a, acc`), which loads the same 64 bytes four times and makes the loop wait
/// on the load ports rather than the FMA units (measured on chapter 05's decode: 2 loads per FMA
/// instead of 0.5). An empty assembler statement that claims to change the register stops the
/// folding and emits no instruction.
inline void keep_in_register([[maybe_unused]] FloatBatch& x) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __asm__("" : "+v"(x.data));
#endif
}

/// Asks for the 64-byte cache line that holds `address` to be brought into L2, without waiting
/// for it (a software prefetch: it never faults, and the load that later needs the line finds it
/// near).
inline void prefetch_line(const void* address) {
  constexpr int kIntoL2 = 2;  // __builtin_prefetch's locality: 3 = L1, 2 = L2
  __builtin_prefetch(address, 0, kIntoL2);
}

/// The largest lane of a register.
inline float max_of_lanes(FloatBatch x) {
#if defined(__AVX512F__)
  if constexpr (kLanes == 16) return _mm512_reduce_max_ps(x);
#endif
  alignas(64) float lanes[kLanes];
  x.store_aligned(lanes);
  return *std::max_element(lanes, lanes + kLanes);
}

/// Rows [r, r + kRows) of score_tile: a kRows x kVectors-register block of accumulators per
/// kTileCols columns; each e loads kVectors registers of Kt and broadcasts kRows elements of Q.
/// With `row_max`, also row_max[r + i] = max_c S[r + i][c] over the cols_padded columns.
template <std::size_t kRows>
inline void score_rows(const float* q, std::size_t d, const float* kt, std::size_t ldk, float* s, std::size_t lds,
                       std::size_t r, std::size_t cols_padded, float scale, float* row_max) {
  FloatBatch running_max[kRows];
  for (std::size_t i = 0; i < kRows; ++i) running_max[i] = FloatBatch(-std::numeric_limits<float>::infinity());
  for (std::size_t c = 0; c < cols_padded; c += kTileCols) {
    FloatBatch acc[kRows][kVectors] = {};
    for (std::size_t e = 0; e < d; ++e) {
      FloatBatch b[kVectors];
      for (std::size_t x = 0; x < kVectors; ++x) {
        b[x] = FloatBatch::load_unaligned(kt + e * ldk + c + x * kLanes);
        if constexpr (kRows > 1) keep_in_register(b[x]);
      }
      for (std::size_t i = 0; i < kRows; ++i) {
        const FloatBatch a(q[(r + i) * d + e]);
        for (std::size_t x = 0; x < kVectors; ++x) acc[i][x] = xsimd::fma(a, b[x], acc[i][x]);
      }
    }
    for (std::size_t i = 0; i < kRows; ++i)
      for (std::size_t x = 0; x < kVectors; ++x) {
        if (scale != 1.0f) acc[i][x] *= FloatBatch(scale);
        acc[i][x].store_unaligned(s + (r + i) * lds + c + x * kLanes);
        if (row_max != nullptr) running_max[i] = xsimd::max(running_max[i], acc[i][x]);
      }
  }
  if (row_max != nullptr)
    for (std::size_t i = 0; i < kRows; ++i) row_max[r + i] = max_of_lanes(running_max[i]);
}

/// S[r][c] = scale * sum_e Q[r][e] Kt[e][c] for r < rows, c < cols_padded (a multiple of
/// kTileCols). Q is row-major `[rows, d]`; Kt is K transposed, `[d, ldk]`; S is `[rows, lds]`.
/// kRows query rows at a time share every load of Kt (4 in v2; v3's 6 x 4 registers load Kt
/// two-thirds as often per FMA); the last rows % kRows rows form one smaller block. With `row_max`
/// (`[rows]`), each row's largest score is kept on the way out of the registers.
template <std::size_t kRows = 4>
inline void score_tile(const float* q, std::size_t d, const float* kt, std::size_t ldk, float* s, std::size_t lds,
                       std::size_t rows, std::size_t cols_padded, float scale, float* row_max = nullptr) {
  std::size_t r = 0;
  for (; r + kRows <= rows; r += kRows) score_rows<kRows>(q, d, kt, ldk, s, lds, r, cols_padded, scale, row_max);
  switch (rows - r) {  // the last rows % kRows rows as one block
    case 0: break;
    case 1: score_rows<1>(q, d, kt, ldk, s, lds, r, cols_padded, scale, row_max); break;
    case 2: score_rows<2>(q, d, kt, ldk, s, lds, r, cols_padded, scale, row_max); break;
    case 3: score_rows<3>(q, d, kt, ldk, s, lds, r, cols_padded, scale, row_max); break;
    case 4: score_rows<4>(q, d, kt, ldk, s, lds, r, cols_padded, scale, row_max); break;
    default: score_rows<5>(q, d, kt, ldk, s, lds, r, cols_padded, scale, row_max); break;
  }
}

/// Rows [r, r + kRows) of accumulate_pv (see there).
template <std::size_t kRows, bool kTransposedP = false>
inline void accumulate_pv_rows(const float* p, std::size_t lds, const float* v, std::size_t ldv, float* o, std::size_t r,
                               std::size_t cols, std::size_t ldo, const float* v_ahead) {
  for (std::size_t e = 0; e < ldo; e += kTileCols) {
    FloatBatch acc[kRows][kVectors];
    for (std::size_t i = 0; i < kRows; ++i)
      for (std::size_t x = 0; x < kVectors; ++x) acc[i][x] = FloatBatch::load_unaligned(o + (r + i) * ldo + e + x * kLanes);
    for (std::size_t c = 0; c < cols; ++c) {
      FloatBatch b[kVectors];
      for (std::size_t x = 0; x < kVectors; ++x) {
        b[x] = FloatBatch::load_unaligned(v + c * ldv + e + x * kLanes);
        if constexpr (kRows > 1) keep_in_register(b[x]);
        // The rows ahead are asked for once, by the first block of rows.
        if (v_ahead != nullptr && r == 0) prefetch_line(v_ahead + c * ldv + e + x * kLanes);
      }
      for (std::size_t i = 0; i < kRows; ++i) {
        const FloatBatch a(kTransposedP ? p[c * lds + r + i] : p[(r + i) * lds + c]);
        for (std::size_t x = 0; x < kVectors; ++x) acc[i][x] = xsimd::fma(a, b[x], acc[i][x]);
      }
    }
    for (std::size_t i = 0; i < kRows; ++i)
      for (std::size_t x = 0; x < kVectors; ++x) acc[i][x].store_unaligned(o + (r + i) * ldo + e + x * kLanes);
  }
}

/// O[r][e] += sum_c P[r][c] V[c][e] for r < rows, c < cols, e < ldo (a multiple of kTileCols).
/// P is `[rows, lds]`, V `[cols, ldv]` with ldv >= ldo, O `[rows, ldo]`; ldo = 0 means ldv (V's
/// rows as wide as O's). kRows rows of P at a time share every load of V (as in score_tile).
///
/// `v_ahead` (optional) lays out rows still to come like V (row c at `v_ahead + c ldv`): each
/// register loaded from row c of V asks for the same 64 bytes of row c of `v_ahead` (a software
/// prefetch into L2), so that a caller streaming V from memory has the rows it will need next
/// arriving while these are multiplied (chapter 05's decode).
///
/// With kTransposedP, p holds P transposed: P[r][c] is p[c lds + r] (the backward pass's
/// dV += P^T dO reads its tile of P that way, with no transposed copy: the kRows elements
/// broadcast together are neighbours in memory).
template <std::size_t kRows = 4, bool kTransposedP = false>
inline void accumulate_pv(const float* p, std::size_t lds, const float* v, std::size_t ldv, float* o, std::size_t rows,
                          std::size_t cols, std::size_t ldo = 0, const float* v_ahead = nullptr) {
  if (ldo == 0) ldo = ldv;
  std::size_t r = 0;
  for (; r + kRows <= rows; r += kRows) accumulate_pv_rows<kRows, kTransposedP>(p, lds, v, ldv, o, r, cols, ldo, v_ahead);
  switch (rows - r) {  // the last rows % kRows rows as one block
    case 0: break;
    case 1: accumulate_pv_rows<1, kTransposedP>(p, lds, v, ldv, o, r, cols, ldo, v_ahead); break;
    case 2: accumulate_pv_rows<2, kTransposedP>(p, lds, v, ldv, o, r, cols, ldo, v_ahead); break;
    case 3: accumulate_pv_rows<3, kTransposedP>(p, lds, v, ldv, o, r, cols, ldo, v_ahead); break;
    case 4: accumulate_pv_rows<4, kTransposedP>(p, lds, v, ldv, o, r, cols, ldo, v_ahead); break;
    default: accumulate_pv_rows<5, kTransposedP>(p, lds, v, ldv, o, r, cols, ldo, v_ahead); break;
  }
}

/// The online softmax's step on one row of a score tile, srow[0, width) (width a multiple of
/// kLanes; hidden and padding entries -inf), with the row's running max m and sum l:
/// m' = max(m, rowmax S); P~ = e^{S - m'} in place (0 where hidden); l' = e^{m - m'} l + rowsum P~;
/// the row of the output accumulator orow[0, o_width) rescaled by e^{m - m'} (0 before the first
/// key). A row that has seen no key yet and sees none here keeps m = -inf and gets P~ = 0.
inline void online_softmax_row(float* srow, std::size_t width, float& m, float& l, float* orow, std::size_t o_width) {
  constexpr float neg_inf = -std::numeric_limits<float>::infinity();
  FloatBatch vmax(neg_inf);
  for (std::size_t c = 0; c < width; c += kLanes) vmax = xsimd::max(vmax, FloatBatch::load_unaligned(srow + c));
  const float m_new = std::max(m, max_of_lanes(vmax));
  if (m_new == neg_inf) {  // e^{-inf - (-inf)} would be NaN: nothing attended yet, nothing to add
    std::fill(srow, srow + width, 0.0f);
    return;
  }
  // P~ = e^{S - m'} in place, and its row sum.
  const FloatBatch vm(m_new);
  FloatBatch vsum(0.0f);
  for (std::size_t c = 0; c < width; c += kLanes) {
    const FloatBatch p = xsimd::exp(FloatBatch::load_unaligned(srow + c) - vm);
    p.store_unaligned(srow + c);
    vsum += p;
  }
  // l' = e^{m - m'} l + rowsum P~; the output row rescaled by e^{m - m'}.
  const float correction = m == neg_inf ? 0.0f : std::exp(m - m_new);
  l = l * correction + xsimd::hadd(vsum);
  m = m_new;
#pragma omp simd
  for (std::size_t e = 0; e < o_width; ++e) orow[e] *= correction;
}

/// Flash attention v3's online softmax step on one row of a score tile, in base 2: the scores
/// are \f$ S \log_2 e \f$ (Q was multiplied by scale log2 e), so \f$ e^{S - m} = 2^{x - m} \f$ with
/// x the stored score, computed by fast_exp2. `row_max` is the largest of srow[0, width) (hidden
/// and padding entries -inf), kept by score_tile; the row sum l is a register of partial sums
/// (`l_lanes`, kLanes floats) added lane by lane, reduced once at the end of the row's keys:
/// m' = max(m, row_max); l' = 2^{m - m'} l + P~; P~ = 2^{x - m'} in place. The output row is
/// rescaled only when the max grew (most tiles after the first few leave it unchanged). A row that
/// has seen no key yet and sees none here keeps m = -inf and gets P~ = 0.
inline void online_softmax_row_base2(float* srow, std::size_t width, float row_max, float& m, float* l_lanes, float* orow,
                                     std::size_t o_width) {
  constexpr float neg_inf = -std::numeric_limits<float>::infinity();
  const float m_new = std::max(m, row_max);
  if (m_new == neg_inf) {  // nothing attended yet, nothing to add
    std::fill(srow, srow + width, 0.0f);
    return;
  }
  FloatBatch l = FloatBatch::load_unaligned(l_lanes);
  if (m_new > m && m != neg_inf) {  // (with m = -inf, l and the output row are still 0)
    const float correction = std::exp2(m - m_new);
    l *= FloatBatch(correction);
#pragma omp simd
    for (std::size_t e = 0; e < o_width; ++e) orow[e] *= correction;
  }
  m = m_new;
  const FloatBatch vm(m_new);
  for (std::size_t c = 0; c < width; c += kLanes) {
    const FloatBatch p = fast_exp2(FloatBatch::load_unaligned(srow + c) - vm);
    p.store_unaligned(srow + c);
    l += p;
  }
  l.store_unaligned(l_lanes);
}

}  // namespace tvlab::opt::detail
