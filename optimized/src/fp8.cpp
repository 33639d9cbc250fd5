#include "tvlab/opt/fp8.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "tvlab/core/error.hpp"

namespace tvlab::opt {
namespace {

constexpr std::size_t kChunk = 1 << 14;  // values per thread's piece of work

// A format's constants: M mantissa bits, the bias, the largest magnitude code, the NaN code and
// what a non-saturating overflow gives (ref/fp8.hpp's table).
struct Layout {
  int mantissa_bits, bias;
  int max_code, nan_code, no_saturate_code;
};

Layout layout(ref::Fp8Format format) {
  return format == ref::Fp8Format::e4m3 ? Layout{3, 7, 0x7E, 0x7F, 0x7F} : Layout{2, 15, 0x7B, 0x7E, 0x7C};
}

#if defined(__AVX512F__)
// Sixteen codes from sixteen floats.
__m128i encode16(__m512i bits, const Layout& f, int overflow_code) {
  const int drop = 23 - f.mantissa_bits, emin = 1 - f.bias;
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(bits, 24), _mm512_set1_epi32(0x80));
  const __m512i a = _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF));
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7F800000));
  const __mmask16 inf = _mm512_cmpeq_epi32_mask(a, _mm512_set1_epi32(0x7F800000));
  // below 2^emin the result is subnormal (or zero): count its grid steps 2^(emin - M)
  const __mmask16 subnormal = _mm512_cmplt_epi32_mask(a, _mm512_set1_epi32((emin + 127) << 23));
  const __m512 steps = _mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(std::ldexp(1.0f, f.mantissa_bits - emin)));
  const __m512i code_subnormal = _mm512_cvtps_epi32(steps);  // to nearest, ties to even
  // a normal result: round the mantissa half to even, then rebias the exponent (127 -> bias)
  const __m512i lowest_kept = _mm512_and_si512(_mm512_srli_epi32(a, drop), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32((1 << (drop - 1)) - 1)), lowest_kept);
  const __m512i code_normal = _mm512_sub_epi32(_mm512_srli_epi32(rounded, drop), _mm512_set1_epi32((127 - f.bias) << f.mantissa_bits));
  __m512i code = _mm512_mask_blend_epi32(subnormal, code_normal, code_subnormal);
  const __mmask16 beyond = _mm512_cmpgt_epi32_mask(code, _mm512_set1_epi32(f.max_code)) | inf;
  code = _mm512_mask_blend_epi32(beyond, code, _mm512_set1_epi32(overflow_code));
  code = _mm512_mask_blend_epi32(nan, code, _mm512_set1_epi32(f.nan_code));
  return _mm512_cvtepi32_epi8(_mm512_or_si512(code, sign));
}

// Sixteen floats from sixteen codes.
__m512 decode16(__m128i codes, ref::Fp8Format format, const Layout& f) {
  const int emin = 1 - f.bias;
  const __m512i c = _mm512_cvtepu8_epi32(codes);
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24);
  const __m512i m = _mm512_and_si512(c, _mm512_set1_epi32(0x7F));
  const __m512i exponent = _mm512_srli_epi32(m, f.mantissa_bits);
  const __m512i mantissa = _mm512_and_si512(m, _mm512_set1_epi32((1 << f.mantissa_bits) - 1));
  // normal: 2^(E - bias) (1 + mantissa / 2^M) as the float's fields; subnormal: mantissa 2^(emin - M)
  const __m512i normal = _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(exponent, _mm512_set1_epi32(127 - f.bias)), 23),
                                         _mm512_slli_epi32(mantissa, 23 - f.mantissa_bits));
  const __m512 subnormal = _mm512_mul_ps(_mm512_cvtepi32_ps(mantissa), _mm512_set1_ps(std::ldexp(1.0f, emin - f.mantissa_bits)));
  const __mmask16 is_subnormal = _mm512_cmpeq_epi32_mask(exponent, _mm512_setzero_si512());
  __m512i value = _mm512_mask_blend_epi32(is_subnormal, normal, _mm512_castps_si512(subnormal));
  value = _mm512_or_si512(value, sign);
  // the special codes: E4M3's S.1111.111 is NaN; E5M2's S.11111.00 is inf, S.11111.{01,10,11} NaN
  const __m512i quiet_nan = _mm512_set1_epi32(0x7FC00000);
  if (format == ref::Fp8Format::e4m3) {
    value = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(m, _mm512_set1_epi32(0x7F)), value, quiet_nan);
  } else {
    value = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(m, _mm512_set1_epi32(0x7C)), value,
                                    _mm512_or_si512(sign, _mm512_set1_epi32(0x7F800000)));
    value = _mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(m, _mm512_set1_epi32(0x7C)), value, quiet_nan);
  }
  return _mm512_castsi512_ps(value);
}
#endif

// work(begin, end) over [0, n) in pieces of kChunk values, the pieces shared among the threads.
template <class Work>
void for_each_chunk(std::size_t n, const Work& work) {
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t c = 0; c < static_cast<std::ptrdiff_t>(chunks); ++c) {
    const std::size_t begin = static_cast<std::size_t>(c) * kChunk;
    work(begin, std::min(n, begin + kChunk));
  }
}

}  // namespace

std::vector<std::uint8_t> fp8_encode(const Tensor1& x, ref::Fp8Format format, ref::Overflow overflow) {
  require_nonempty("fp8_encode", "x", x);
  const Layout f = layout(format);
  const int overflow_code = overflow == ref::Overflow::saturate ? f.max_code : f.no_saturate_code;
  std::vector<std::uint8_t> codes(x.size());
  for_each_chunk(x.size(), [&](std::size_t i, std::size_t end) {
#if defined(__AVX512F__)
    for (; i + 16 <= end; i += 16)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes.data() + i),
                       encode16(_mm512_loadu_si512(x.data() + i), f, overflow_code));
#endif
    for (; i < end; ++i) codes[i] = ref::fp8_encode(x(i), format, overflow);  // the rest, one by one
  });
  return codes;
}

Tensor1 fp8_decode(const std::vector<std::uint8_t>& codes, ref::Fp8Format format) {
  require(!codes.empty(), "fp8_decode", "codes is empty");
  const Layout f = layout(format);
  Tensor1 y = Tensor1::from_shape({codes.size()});
  for_each_chunk(codes.size(), [&](std::size_t i, std::size_t end) {
#if defined(__AVX512F__)
    for (; i + 16 <= end; i += 16)
      _mm512_storeu_ps(y.data() + i, decode16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes.data() + i)), format, f));
#endif
    for (; i < end; ++i) y(i) = ref::fp8_decode(codes[i], format);
  });
  return y;
}

}  // namespace tvlab::opt
