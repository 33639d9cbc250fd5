#pragma once
// The tile products of flash attention's v2 as register-blocked SIMD micro-kernels (xsimd:
// 16 floats per register with AVX-512, 8 with AVX2). Both keep a 4-row x 2-register block of
// accumulators in registers and stream the other operand from L1.

#include <xsimd/xsimd.hpp>

#include <cstddef>

namespace tvlab::opt::detail {

using FloatBatch = xsimd::batch<float>;
inline constexpr std::size_t kLanes = FloatBatch::size;
inline constexpr std::size_t kTileCols = 2 * kLanes;  // columns per micro-kernel block

/// S[r][c] = scale * sum_e Q[r][e] Kt[e][c] for r < rows, c < cols_padded (a multiple of
/// kTileCols). Q is row-major `[rows, d]`; Kt is K transposed, `[d, ldk]`; S is `[rows, lds]`.
/// Four query rows at a time share every load of Kt: 8 FMAs per 2 loads.
inline void score_tile(const float* q, std::size_t d, const float* kt, std::size_t ldk, float* s, std::size_t lds,
                       std::size_t rows, std::size_t cols_padded, float scale) {
  std::size_t r = 0;
  for (; r + 4 <= rows; r += 4)
    for (std::size_t c = 0; c < cols_padded; c += kTileCols) {
      FloatBatch acc[4][2] = {};
      for (std::size_t e = 0; e < d; ++e) {
        const FloatBatch b0 = FloatBatch::load_unaligned(kt + e * ldk + c);
        const FloatBatch b1 = FloatBatch::load_unaligned(kt + e * ldk + c + kLanes);
        for (std::size_t i = 0; i < 4; ++i) {
          const FloatBatch a(q[(r + i) * d + e]);
          acc[i][0] = xsimd::fma(a, b0, acc[i][0]);
          acc[i][1] = xsimd::fma(a, b1, acc[i][1]);
        }
      }
      for (std::size_t i = 0; i < 4; ++i) {
        (acc[i][0] * FloatBatch(scale)).store_unaligned(s + (r + i) * lds + c);
        (acc[i][1] * FloatBatch(scale)).store_unaligned(s + (r + i) * lds + c + kLanes);
      }
    }
  for (; r < rows; ++r)  // the last rows % 4 rows, one at a time
    for (std::size_t c = 0; c < cols_padded; c += kTileCols) {
      FloatBatch acc0(0.0f), acc1(0.0f);
      for (std::size_t e = 0; e < d; ++e) {
        const FloatBatch a(q[r * d + e]);
        acc0 = xsimd::fma(a, FloatBatch::load_unaligned(kt + e * ldk + c), acc0);
        acc1 = xsimd::fma(a, FloatBatch::load_unaligned(kt + e * ldk + c + kLanes), acc1);
      }
      (acc0 * FloatBatch(scale)).store_unaligned(s + r * lds + c);
      (acc1 * FloatBatch(scale)).store_unaligned(s + r * lds + c + kLanes);
    }
}

/// O[r][e] += sum_c P[r][c] V[c][e] for r < rows, c < cols, e < ldv (a multiple of kTileCols).
/// P is `[rows, lds]`, V `[cols, ldv]`, O `[rows, ldv]`.
inline void accumulate_pv(const float* p, std::size_t lds, const float* v, std::size_t ldv, float* o, std::size_t rows,
                          std::size_t cols) {
  std::size_t r = 0;
  for (; r + 4 <= rows; r += 4)
    for (std::size_t e = 0; e < ldv; e += kTileCols) {
      FloatBatch acc[4][2];
      for (std::size_t i = 0; i < 4; ++i) {
        acc[i][0] = FloatBatch::load_unaligned(o + (r + i) * ldv + e);
        acc[i][1] = FloatBatch::load_unaligned(o + (r + i) * ldv + e + kLanes);
      }
      for (std::size_t c = 0; c < cols; ++c) {
        const FloatBatch b0 = FloatBatch::load_unaligned(v + c * ldv + e);
        const FloatBatch b1 = FloatBatch::load_unaligned(v + c * ldv + e + kLanes);
        for (std::size_t i = 0; i < 4; ++i) {
          const FloatBatch a(p[(r + i) * lds + c]);
          acc[i][0] = xsimd::fma(a, b0, acc[i][0]);
          acc[i][1] = xsimd::fma(a, b1, acc[i][1]);
        }
      }
      for (std::size_t i = 0; i < 4; ++i) {
        acc[i][0].store_unaligned(o + (r + i) * ldv + e);
        acc[i][1].store_unaligned(o + (r + i) * ldv + e + kLanes);
      }
    }
  for (; r < rows; ++r)
    for (std::size_t e = 0; e < ldv; e += kTileCols) {
      FloatBatch acc0 = FloatBatch::load_unaligned(o + r * ldv + e), acc1 = FloatBatch::load_unaligned(o + r * ldv + e + kLanes);
      for (std::size_t c = 0; c < cols; ++c) {
        const FloatBatch a(p[r * lds + c]);
        acc0 = xsimd::fma(a, FloatBatch::load_unaligned(v + c * ldv + e), acc0);
        acc1 = xsimd::fma(a, FloatBatch::load_unaligned(v + c * ldv + e + kLanes), acc1);
      }
      acc0.store_unaligned(o + r * ldv + e);
      acc1.store_unaligned(o + r * ldv + e + kLanes);
    }
}

}  // namespace tvlab::opt::detail
