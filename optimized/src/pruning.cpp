#include "tvlab/opt/pruning.hpp"

#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "tvlab/core/error.hpp"

namespace tvlab::opt {
namespace {

// One row: y_r = sum_i v_i x_{4 floor(i / 2) + p_i} over the row's kept values (cols / 2 of them).
// The positions are checked as they are read (each in 0..3, each group's two increasing): `bad`
// is set when one is not, and the caller then runs the reference's checks for the message.
float sparse_row(const float* values, const std::uint8_t* positions, const float* x, std::size_t kept, bool& bad) {
  std::size_t i = 0;
  float sum = 0.0f;
#if defined(__AVX512F__)
  __mmask16 malformed = 0;
  // lane k of 16 meets x[4 (k / 2) + p_k] of the 32 entries that eight groups cover
  const __m512i group_base = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);
  __m512 acc = _mm512_setzero_ps();
  for (; i + 16 <= kept; i += 16) {
    const float* xg = x + 2 * i;  // the 32 entries of x under these eight groups
    const __m512i p = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(positions + i)));
    // p_{2k} < p_{2k+1} (lanes swapped in pairs), and p_{2k+1} <= 3
    const __m512i partner = _mm512_shuffle_epi32(p, _MM_PERM_CDAB);
    malformed |= _mm512_mask_cmpge_epi32_mask(0x5555, p, partner) | _mm512_cmpgt_epi32_mask(p, _mm512_set1_epi32(3));
    const __m512 met = _mm512_permutex2var_ps(_mm512_loadu_ps(xg), _mm512_add_epi32(group_base, p), _mm512_loadu_ps(xg + 16));
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(values + i), met, acc);
  }
  sum = _mm512_reduce_add_ps(acc);
  bad = bad || malformed != 0;
#elif defined(__AVX2__)
  // lane k of 8 meets x[4 (k / 2) + p_k] of the 16 entries that four groups cover: two 8-float
  // permutes (index mod 8) and a blend on whether the index reaches the second eight
  const __m256i group_base = _mm256_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12);
  __m256 acc = _mm256_setzero_ps();
  __m256i malformed = _mm256_setzero_si256();
  for (; i + 8 <= kept; i += 8) {
    const float* xg = x + 2 * i;
    const __m256i p = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(positions + i)));
    // p_{2k} < p_{2k+1} (lanes swapped in pairs, even lanes compared), and p <= 3
    const __m256i partner = _mm256_shuffle_epi32(p, _MM_SHUFFLE(2, 3, 0, 1));
    const __m256i even = _mm256_setr_epi32(-1, 0, -1, 0, -1, 0, -1, 0);
    malformed = _mm256_or_si256(malformed, _mm256_and_si256(even, _mm256_cmpgt_epi32(_mm256_add_epi32(p, _mm256_set1_epi32(1)), partner)));
    malformed = _mm256_or_si256(malformed, _mm256_cmpgt_epi32(p, _mm256_set1_epi32(3)));
    const __m256i index = _mm256_add_epi32(group_base, p);
    const __m256 first = _mm256_permutevar8x32_ps(_mm256_loadu_ps(xg), index);
    const __m256 second = _mm256_permutevar8x32_ps(_mm256_loadu_ps(xg + 8), index);  // uses index mod 8
    const __m256 upper = _mm256_castsi256_ps(_mm256_cmpgt_epi32(index, _mm256_set1_epi32(7)));
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(values + i), _mm256_blendv_ps(first, second, upper), acc);
  }
  const __m128 half = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  const __m128 quarter = _mm_add_ps(half, _mm_movehl_ps(half, half));
  sum = _mm_cvtss_f32(_mm_add_ss(quarter, _mm_shuffle_ps(quarter, quarter, 1)));
  bad = bad || !_mm256_testz_si256(malformed, malformed);
#endif
  for (; i < kept; ++i) {  // the rest, one by one (i is even here: whole groups)
    if (positions[i] > 3 || (i % 2 == 0 && positions[i] >= positions[i + 1])) {
      bad = true;
      continue;
    }
    sum += values[i] * x[4 * (i / 2) + positions[i]];
  }
  return sum;
}

}  // namespace

Tensor1 sparse_2_4_gemv(const ref::Sparse24& s, const Tensor1& x) {
  const char* fn = "sparse_2_4_gemv";
  // the sizes first; the positions and values are checked as the kernel reads them (a second pass
  // over the whole matrix would cost as much as the product)
  require(s.cols % 4 == 0 && s.values.size() == s.rows * s.cols / 2 && s.positions.size() == s.values.size(), fn,
          "s is malformed: ", s.values.size(), " values and ", s.positions.size(), " positions for ", s.rows, " x ", s.cols);
  require(x.size() == s.cols, fn, "x has ", x.size(), " values, expected s.cols = ", s.cols);
  require_finite(fn, "x", x);
  Tensor1 y = Tensor1::from_shape({s.rows});
  const std::size_t kept = s.cols / 2;
  bool bad = false;
#pragma omp parallel for schedule(static) reduction(|| : bad)
  for (std::ptrdiff_t r = 0; r < static_cast<std::ptrdiff_t>(s.rows); ++r) {
    y(r) = sparse_row(s.values.data() + r * kept, s.positions.data() + r * kept, x.data(), kept, bad);
    bad = bad || !std::isfinite(y(r));  // x is finite: a non-finite row has a non-finite value (or overflowed)
  }
  // the reference's checks name what is wrong; a row that only overflowed passes them, as in the reference
  if (bad) ref::validate_sparse_2_4(fn, s);
  return y;
}

}  // namespace tvlab::opt
