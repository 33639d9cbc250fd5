#pragma once
// The tile products of flash attention's v2 as register-blocked SIMD micro-kernels (xsimd:
// 16 floats per register with AVX-512, 8 with AVX2). Both keep a 4-row x kVectors-register block
// of accumulators in registers and stream the other operand from L1.

#include <xsimd/xsimd.hpp>

#include <cstddef>

namespace tvlab::opt::detail {

using FloatBatch = xsimd::batch<float>;
inline constexpr std::size_t kLanes = FloatBatch::size;
// Registers per row in a micro-kernel block: 4 x 4 accumulators + 4 loads + 1 broadcast fit
// AVX-512's 32 registers; AVX2 has 16, so 4 x 2 there.
inline constexpr std::size_t kVectors = kLanes >= 16 ? 4 : 2;
inline constexpr std::size_t kTileCols = kVectors * kLanes;  // columns per micro-kernel block

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
        for (std::size_t x = 0; x < kVectors; ++x) b[x] = FloatBatch::load_unaligned(kt + e * ldk + c + x * kLanes);
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

/// O[r][e] += sum_c P[r][c] V[c][e] for r < rows, c < cols, e < ldv (a multiple of kTileCols).
/// P is `[rows, lds]`, V `[cols, ldv]`, O `[rows, ldv]`.
inline void accumulate_pv(const float* p, std::size_t lds, const float* v, std::size_t ldv, float* o, std::size_t rows,
                          std::size_t cols) {
  std::size_t r = 0;
  for (; r + 4 <= rows; r += 4)
    for (std::size_t e = 0; e < ldv; e += kTileCols) {
      FloatBatch acc[4][kVectors];
      for (std::size_t i = 0; i < 4; ++i)
        for (std::size_t x = 0; x < kVectors; ++x) acc[i][x] = FloatBatch::load_unaligned(o + (r + i) * ldv + e + x * kLanes);
      for (std::size_t c = 0; c < cols; ++c) {
        FloatBatch b[kVectors];
        for (std::size_t x = 0; x < kVectors; ++x) b[x] = FloatBatch::load_unaligned(v + c * ldv + e + x * kLanes);
        for (std::size_t i = 0; i < 4; ++i) {
          const FloatBatch a(p[(r + i) * lds + c]);
          for (std::size_t x = 0; x < kVectors; ++x) acc[i][x] = xsimd::fma(a, b[x], acc[i][x]);
        }
      }
      for (std::size_t i = 0; i < 4; ++i)
        for (std::size_t x = 0; x < kVectors; ++x) acc[i][x].store_unaligned(o + (r + i) * ldv + e + x * kLanes);
    }
  for (; r < rows; ++r)
    for (std::size_t e = 0; e < ldv; e += kTileCols) {
      FloatBatch acc[kVectors];
      for (std::size_t x = 0; x < kVectors; ++x) acc[x] = FloatBatch::load_unaligned(o + r * ldv + e + x * kLanes);
      for (std::size_t c = 0; c < cols; ++c) {
        const FloatBatch a(p[r * lds + c]);
        for (std::size_t x = 0; x < kVectors; ++x)
          acc[x] = xsimd::fma(a, FloatBatch::load_unaligned(v + c * ldv + e + x * kLanes), acc[x]);
      }
      for (std::size_t x = 0; x < kVectors; ++x) acc[x].store_unaligned(o + r * ldv + e + x * kLanes);
    }
}

}  // namespace tvlab::opt::detail
