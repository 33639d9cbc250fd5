#pragma once
// The tile products of flash attention's v2 as register-blocked SIMD micro-kernels (xsimd:
// 16 floats per register with AVX-512, 8 with AVX2). Both keep a 4-row x kVectors-register block
// of accumulators in registers and stream the other operand from L1. And the online softmax's
// step on one row of a score tile, shared by the dense (chapter 04) and sparse (chapter 03) kernels.

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

namespace tvlab::opt::detail {

using FloatBatch = xsimd::batch<float>;
inline constexpr std::size_t kLanes = FloatBatch::size;
// Registers per row in a micro-kernel block: 4 x 4 accumulators + 4 loads + 1 broadcast fit
// AVX-512's 32 registers; AVX2 has 16, so 4 x 2 there.
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

/// S[r][c] = scale * sum_e Q[r][e] Kt[e][c] for r < rows, c < cols_padded (a multiple of
/// kTileCols). Q is row-major `[rows, d]`; Kt is K transposed, `[d, ldk]`; S is `[rows, lds]`.
/// Four query rows at a time share every load of Kt.
inline void score_tile(const float* q, std::size_t d, const float* kt, std::size_t ldk, float* s, std::size_t lds,
                       std::size_t rows, std::size_t cols_padded, float scale) {
  std::size_t r = 0;
  for (; r + 4 <= rows; r += 4)
    for (std::size_t c = 0; c < cols_padded; c += kTileCols) {
      FloatBatch acc[4][kVectors] = {};
      for (std::size_t e = 0; e < d; ++e) {
        FloatBatch b[kVectors];
        for (std::size_t x = 0; x < kVectors; ++x) {
          b[x] = FloatBatch::load_unaligned(kt + e * ldk + c + x * kLanes);
          keep_in_register(b[x]);
        }
        for (std::size_t i = 0; i < 4; ++i) {
          const FloatBatch a(q[(r + i) * d + e]);
          for (std::size_t x = 0; x < kVectors; ++x) acc[i][x] = xsimd::fma(a, b[x], acc[i][x]);
        }
      }
      for (std::size_t i = 0; i < 4; ++i)
        for (std::size_t x = 0; x < kVectors; ++x)
          (acc[i][x] * FloatBatch(scale)).store_unaligned(s + (r + i) * lds + c + x * kLanes);
    }
  for (; r < rows; ++r)  // the last rows % 4 rows, one at a time
    for (std::size_t c = 0; c < cols_padded; c += kTileCols) {
      FloatBatch acc[kVectors] = {};
      for (std::size_t e = 0; e < d; ++e) {
        const FloatBatch a(q[r * d + e]);
        for (std::size_t x = 0; x < kVectors; ++x)
          acc[x] = xsimd::fma(a, FloatBatch::load_unaligned(kt + e * ldk + c + x * kLanes), acc[x]);
      }
      for (std::size_t x = 0; x < kVectors; ++x) (acc[x] * FloatBatch(scale)).store_unaligned(s + r * lds + c + x * kLanes);
    }
}

/// O[r][e] += sum_c P[r][c] V[c][e] for r < rows, c < cols, e < ldo (a multiple of kTileCols).
/// P is `[rows, lds]`, V `[cols, ldv]` with ldv >= ldo, O `[rows, ldo]`; ldo = 0 means ldv (V's
/// rows as wide as O's).
///
/// `v_ahead` (optional) lays out rows still to come like V (row c at `v_ahead + c ldv`): each
/// register loaded from row c of V asks for the same 64 bytes of row c of `v_ahead` (a software
/// prefetch into L2), so that a caller streaming V from memory has the rows it will need next
/// arriving while these are multiplied (chapter 05's decode).
inline void accumulate_pv(const float* p, std::size_t lds, const float* v, std::size_t ldv, float* o, std::size_t rows,
                          std::size_t cols, std::size_t ldo = 0, const float* v_ahead = nullptr) {
  if (ldo == 0) ldo = ldv;
  // The rows ahead are asked for once, by the first block of rows.
  const auto prefetch = [&](std::size_t r, std::size_t c, std::size_t e) {
    if (v_ahead != nullptr && r == 0) prefetch_line(v_ahead + c * ldv + e);
  };
  std::size_t r = 0;
  for (; r + 4 <= rows; r += 4)
    for (std::size_t e = 0; e < ldo; e += kTileCols) {
      FloatBatch acc[4][kVectors];
      for (std::size_t i = 0; i < 4; ++i)
        for (std::size_t x = 0; x < kVectors; ++x) acc[i][x] = FloatBatch::load_unaligned(o + (r + i) * ldo + e + x * kLanes);
      for (std::size_t c = 0; c < cols; ++c) {
        FloatBatch b[kVectors];
        for (std::size_t x = 0; x < kVectors; ++x) {
          b[x] = FloatBatch::load_unaligned(v + c * ldv + e + x * kLanes);
          keep_in_register(b[x]);
          prefetch(r, c, e + x * kLanes);
        }
        for (std::size_t i = 0; i < 4; ++i) {
          const FloatBatch a(p[(r + i) * lds + c]);
          for (std::size_t x = 0; x < kVectors; ++x) acc[i][x] = xsimd::fma(a, b[x], acc[i][x]);
        }
      }
      for (std::size_t i = 0; i < 4; ++i)
        for (std::size_t x = 0; x < kVectors; ++x) acc[i][x].store_unaligned(o + (r + i) * ldo + e + x * kLanes);
    }
  for (; r < rows; ++r)
    for (std::size_t e = 0; e < ldo; e += kTileCols) {
      FloatBatch acc[kVectors];
      for (std::size_t x = 0; x < kVectors; ++x) acc[x] = FloatBatch::load_unaligned(o + r * ldo + e + x * kLanes);
      for (std::size_t c = 0; c < cols; ++c) {
        const FloatBatch a(p[r * lds + c]);
        for (std::size_t x = 0; x < kVectors; ++x) {
          acc[x] = xsimd::fma(a, FloatBatch::load_unaligned(v + c * ldv + e + x * kLanes), acc[x]);
          prefetch(r, c, e + x * kLanes);
        }
      }
      for (std::size_t x = 0; x < kVectors; ++x) acc[x].store_unaligned(o + r * ldo + e + x * kLanes);
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
  alignas(64) float lanes[kLanes];
  vmax.store_aligned(lanes);
  const float m_new = std::max(m, *std::max_element(lanes, lanes + kLanes));
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

}  // namespace tvlab::opt::detail
