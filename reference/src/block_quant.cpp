#include "tvlab/ref/block_quant.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

#include "tvlab/core/error.hpp"

namespace tvlab::ref {
namespace {

constexpr std::size_t kBlock = 32;

void store_u32(std::uint32_t value, std::uint8_t* out) {
  for (int b = 0; b < 4; ++b) out[b] = static_cast<std::uint8_t>(value >> (8 * b));
}

std::uint32_t load_u32(const std::uint8_t* in) {
  return static_cast<std::uint32_t>(in[0]) | static_cast<std::uint32_t>(in[1]) << 8 |
         static_cast<std::uint32_t>(in[2]) << 16 | static_cast<std::uint32_t>(in[3]) << 24;
}

// The element of largest magnitude among x[0 .. n), with its sign (the first one on a tie; 0 when
// all are 0).
float signed_absmax(const float* x, std::size_t n = kBlock) {
  float amax = 0.0f, max = 0.0f;
  for (std::size_t j = 0; j < n; ++j)
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  return max;
}

// The symmetric 4- and 5-bit types: d = x_max / -(2^(bits-1)), q_j = min(2^bits - 1,
// trunc(x_j / d + 2^(bits-1) + 0.5)). Returns the codes and the float d.
float symmetric_codes(const float* x, int bits, int* q) {
  const float half = static_cast<float>(1 << (bits - 1));
  const int top = (1 << bits) - 1;
  const float d = signed_absmax(x) / -half;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (std::size_t j = 0; j < kBlock; ++j)
    q[j] = std::min(top, static_cast<int>(static_cast<std::int8_t>(x[j] * id + (half + 0.5f))));
  return d;
}

// The asymmetric types: m = min_j x_j, d = (max_j x_j - m) / (2^bits - 1),
// q_j = trunc((x_j - m) / d + 0.5), at most 2^bits - 1. Returns d and m.
void asymmetric_codes(const float* x, int bits, int* q, float& d, float& m) {
  float min = FLT_MAX, max = -FLT_MAX;
  for (std::size_t j = 0; j < kBlock; ++j) min = std::min(min, x[j]), max = std::max(max, x[j]);
  const int top = (1 << bits) - 1;
  d = (max - min) / static_cast<float>(top);
  m = min;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (std::size_t j = 0; j < kBlock; ++j)
    q[j] = std::min(top, static_cast<int>(static_cast<std::uint8_t>((x[j] - min) * id + 0.5f)));
}

// Byte j: the low 4 bits of q_j, then those of q_{j+16} in the high half.
void pack_nibbles(const int* q, std::uint8_t* out) {
  for (std::size_t j = 0; j < kBlock / 2; ++j)
    out[j] = static_cast<std::uint8_t>((q[j] & 0x0F) | ((q[j + kBlock / 2] & 0x0F) << 4));
}

// Bit j: the fifth bit (value 16) of q_j.
std::uint32_t fifth_bits(const int* q) {
  std::uint32_t qh = 0;
  for (std::size_t j = 0; j < kBlock; ++j) qh |= static_cast<std::uint32_t>((q[j] >> 4) & 1) << j;
  return qh;
}

// The code of element j from the nibbles (and the fifth bits, when `qh` is given).
int code(const std::uint8_t* nibbles, const std::uint32_t* qh, std::size_t j) {
  const int low = j < kBlock / 2 ? nibbles[j] & 0x0F : nibbles[j - kBlock / 2] >> 4;
  return qh ? low | static_cast<int>(((*qh >> j) & 1) << 4) : low;
}

// ------------------------------------------------------------------ the K-quants

constexpr std::size_t kSuper = 256;  // QK_K: the super-block of Q4_K and Q6_K

// Round to the nearest integer, halves to the even one (ggml's nearest_int, which gets it by
// adding 1.5 * 2^23 in float, where the spacing of floats is 1). ggml asserts |v| <= 4194303;
// beyond that (and for NaN, reached only from values near FLT_MAX) this saturates, to stay defined.
int round_half_even(float v) {
  constexpr float kLimit = 4194303.0f;
  if (!(std::fabs(v) <= kLimit)) return v > 0.0f ? 4194303 : v < 0.0f ? -4194303 : 0;
  return static_cast<int>(std::nearbyint(v));  // the default rounding mode: to nearest, ties to even
}

int clamp(int v, int lo, int hi) { return std::max(lo, std::min(hi, v)); }

// The affine fit of a sub-block (ggml's make_qkx2_quants): codes L_i in [0, nmax] and a scale s
// and minimum b (b <= 0) with x_i ~ s L_i + b, chosen to make the weighted error
// E = sum_i w_i (s L_i + b - x_i)^2 small. Start from the min-max grid; then, for each of
// nstep + 1 trial grids iscale = (nmax + rmin + rdelta * is) / (max - min), round the codes on it and
// solve the 2 x 2 least-squares problem for (s, b) given those codes:
//   D = W S_ll - S_l^2,  s = (W S_xl - S_x S_l) / D,  b = (S_ll S_x - S_l S_xl) / D
// (W = sum w, S_l = sum w L, S_ll = sum w L^2, S_x = sum w x, S_xl = sum w L x); keep the trial
// with the smallest E. A positive b is replaced by 0 with s = S_xl / S_ll (the minimum is never
// above 0). With `absolute` (Q2_K's choice), E weighs |s L_i + b - x_i| instead of its square; the
// line is still the least-squares one. Returns s; `neg_min` gets -b. Float throughout, in ggml's
// order of operations.
float fit_scale_and_min(const float* x, const float* w, std::size_t n, int nmax, float rmin, float rdelta, int nstep,
                        bool absolute, std::uint8_t* L, float& neg_min) {
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (std::size_t i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0.0f) min = 0.0f;  // the grid always reaches 0
  if (max == min) {            // all zero (or all one negative value): one code
    for (std::size_t i = 0; i < n; ++i) L[i] = 0;
    neg_min = -min;
    return 0.0f;
  }
  // the min-max grid: step (max - min) / nmax, codes rounded onto it
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1.0f / iscale;
  float best_error = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    L[i] = static_cast<std::uint8_t>(clamp(round_half_even(iscale * (x[i] - min)), 0, nmax));
    const float diff = scale * static_cast<float>(L[i]) + min - x[i];
    best_error += w[i] * (absolute ? std::fabs(diff) : diff * diff);
  }
  std::uint8_t trial[kSuper];
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (std::size_t i = 0; i < n; ++i) {
      const int l = clamp(round_half_even(iscale * (x[i] - min)), 0, nmax);
      trial[i] = static_cast<std::uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (!(D > 0.0f)) continue;  // the codes are all equal: no line through them
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    if (this_min > 0.0f) {
      this_min = 0.0f;
      this_scale = sum_xl / sum_l2;
    }
    float error = 0.0f;
    for (std::size_t i = 0; i < n; ++i) {
      const float diff = this_scale * static_cast<float>(trial[i]) + this_min - x[i];
      error += w[i] * (absolute ? std::fabs(diff) : diff * diff);
    }
    if (error < best_error) {
      std::copy(trial, trial + n, L);
      best_error = error;
      scale = this_scale;
      min = this_min;
    }
  }
  neg_min = -min;
  return scale;
}

// The symmetric fit of a sub-block (ggml's make_qx_quants with weights w_i = x_i^2): codes
// l_i in [-nmax, nmax - 1] (stored as l_i + nmax) and a scale s with x_i ~ s l_i. The grid is set
// by the element of largest magnitude, with its sign, x_max: iscale = -(nmax + 0.1 is) / x_max for
// is = 0, then -9 ... 9; on each, the codes are rounded and the best scale for them is
// s = S_xl / S_ll (S_xl = sum w x l, S_ll = sum w l^2), which leaves the error
// sum w x^2 - S_xl^2 / S_ll: the grid with the largest S_xl^2 / S_ll wins. Returns s (0 for an
// all-zero sub-block).
float fit_symmetric_scale(const float* x, std::size_t n, int nmax, std::uint8_t* L) {
  const float x_max = signed_absmax(x, n);
  if (std::fabs(x_max) < 1e-15f) {  // ggml's GROUP_MAX_EPS: all zero
    for (std::size_t i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  // codes on the grid iscale, and their sums S_xl and S_ll
  auto codes_on = [&](float iscale, float& sum_xl, float& sum_l2, bool store) {
    sum_xl = 0.0f, sum_l2 = 0.0f;
    for (std::size_t i = 0; i < n; ++i) {
      const int l = clamp(round_half_even(iscale * x[i]), -nmax, nmax - 1);
      if (store) L[i] = static_cast<std::uint8_t>(l + nmax);
      const float w = x[i] * x[i];
      const float fl = static_cast<float>(l);
      sum_xl += w * x[i] * fl;
      sum_l2 += w * fl * fl;
    }
  };
  float sum_xl = 0.0f, sum_l2 = 0.0f;
  codes_on(static_cast<float>(-nmax) / x_max, sum_xl, sum_l2, true);
  float scale = sum_l2 != 0.0f ? sum_xl / sum_l2 : 0.0f;
  float best = scale * sum_xl;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / x_max;
    codes_on(iscale, sum_xl, sum_l2, false);
    if (sum_l2 > 0.0f && sum_xl * sum_xl > best * sum_l2) {  // S_xl^2 / S_ll > best, without dividing
      codes_on(iscale, sum_xl, sum_l2, true);
      scale = sum_xl / sum_l2;
      best = scale * sum_xl;
    }
  }
  return scale;
}

// Q3_K's symmetric fit of a sub-block (ggml's make_q3_quants): codes l_i in [-nmax, nmax - 1]
// (stored as l_i + nmax) and a scale s with x_i ~ s l_i, weights w_i = x_i^2. Start on the grid
// iscale = -nmax / x_max; then improve one code at a time: the best code for x_i, given the others'
// sums S_xl' = S_xl - w_i x_i l_i and S_ll' = S_ll - w_i l_i^2, is round(x_i S_ll' / S_xl'), and a
// change is kept when it raises S_xl^2 / S_ll (the error is sum w x^2 - S_xl^2 / S_ll), compared as
// S_xl'^2 S_ll > S_xl^2 S_ll' without dividing; at most 5 passes, stopping at one without a change.
// Returns s = S_xl / S_ll (0 for an all-zero sub-block, whose codes are all 0, not nmax, as ggml's).
float fit_symmetric_scale_by_descent(const float* x, std::size_t n, int nmax, std::uint8_t* L) {
  const float x_max = signed_absmax(x, n);
  if (std::fabs(x_max) < 1e-15f) {  // ggml's GROUP_MAX_EPS: all zero
    for (std::size_t i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / x_max;
  int l[kSuper];
  float sum_xl = 0.0f, sum_l2 = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    l[i] = clamp(round_half_even(iscale * x[i]), -nmax, nmax - 1);
    const float w = x[i] * x[i];
    sum_xl += w * x[i] * static_cast<float>(l[i]);
    sum_l2 += w * static_cast<float>(l[i]) * static_cast<float>(l[i]);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sum_xl - w * x[i] * static_cast<float>(l[i]);  // the sums without element i
      if (!(slx > 0.0f)) continue;
      float sl2 = sum_l2 - w * static_cast<float>(l[i]) * static_cast<float>(l[i]);
      const int best = clamp(round_half_even(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (best == l[i]) continue;
      slx += w * x[i] * static_cast<float>(best);
      sl2 += w * static_cast<float>(best) * static_cast<float>(best);
      if (sl2 > 0.0f && slx * slx * sum_l2 > sum_xl * sum_xl * sl2) {  // S_xl^2 / S_ll grew
        l[i] = best;
        sum_xl = slx;
        sum_l2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (std::size_t i = 0; i < n; ++i) L[i] = static_cast<std::uint8_t>(l[i] + nmax);
  return sum_l2 > 0.0f ? sum_xl / sum_l2 : 0.0f;
}

}  // namespace

void q4_k_scale_min(std::size_t j, const std::uint8_t* packed, int& sc, int& m) {
  if (j < 4) {
    sc = packed[j] & 63;
    m = packed[j + 4] & 63;
  } else {
    sc = (packed[j + 4] & 0x0F) | ((packed[j - 4] >> 6) << 4);
    m = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

namespace {

// Steps 1 to 4 of Q4_K and Q5_K (8 sub-blocks of 32 with an affine fit each, codes 0 to nmax):
// d, dmin and the 12 bytes of 6-bit scale and min codes into block[0, 16), the codes into L.
void affine_super_block(const float* x, int nmax, float rmin, int nstep, std::uint8_t* block, std::uint8_t* L) {
  constexpr std::size_t kSub = 32, kSubs = kSuper / kSub;
  float scales[kSubs], mins[kSubs];
  // Step 1: each sub-block's own affine fit, weighting element i by av_x + |x_i|
  // (av_x = sqrt(sum x^2 / 32), the sub-block's RMS): large weights matter more, but none is 0.
  float max_scale = 0.0f, max_min = 0.0f;
  for (std::size_t j = 0; j < kSubs; ++j) {
    const float* xs = x + kSub * j;
    float sum_x2 = 0.0f;
    for (std::size_t l = 0; l < kSub; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / static_cast<float>(kSub));
    float weights[kSub];
    for (std::size_t l = 0; l < kSub; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = fit_scale_and_min(xs, weights, kSub, nmax, rmin, 0.1f, nstep, false, L + kSub * j, mins[j]);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  // Step 2: the scales and mins as 6-bit codes against the largest of each:
  // s_j = round(63 scale_j / max_scale), m_j = round(63 min_j / max_min), at most 63 (as uint8, as ggml)
  const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
  std::uint8_t* packed = block + 4;
  for (std::size_t j = 0; j < kSubs; ++j) {
    const auto ls = std::min<std::uint8_t>(63, static_cast<std::uint8_t>(round_half_even(inv_scale * scales[j])));
    const auto lm = std::min<std::uint8_t>(63, static_cast<std::uint8_t>(round_half_even(inv_min * mins[j])));
    if (j < 4) {
      packed[j] = ls;
      packed[j + 4] = lm;
    } else {  // low 4 bits together in byte j + 4; the top 2 into the free bits 6-7 of bytes j - 4 and j
      packed[j + 4] = static_cast<std::uint8_t>((ls & 0x0F) | ((lm & 0x0F) << 4));
      packed[j - 4] = static_cast<std::uint8_t>(packed[j - 4] | ((ls >> 4) << 6));
      packed[j] = static_cast<std::uint8_t>(packed[j] | ((lm >> 4) << 6));
    }
  }
  // Step 3: the super-block scales d = max_scale / 63 and dmin = max_min / 63, stored in fp16
  write_fp16(max_scale / 63.0f, block);
  write_fp16(max_min / 63.0f, block + 2);
  // Step 4: the codes again, on the grid the stored numbers give: q = round((x + dmin m_j) / (d s_j)),
  // clamped to [0, nmax]. A sub-block whose scale code is 0 keeps its codes from step 1 (they all
  // decode to -dmin m_j).
  const float d = read_fp16(block), dmin = read_fp16(block + 2);
  for (std::size_t j = 0; j < kSubs; ++j) {
    int sc = 0, m = 0;
    q4_k_scale_min(j, packed, sc, m);
    const float step = d * static_cast<float>(sc);
    if (step == 0.0f) continue;
    const float offset = dmin * static_cast<float>(m);
    for (std::size_t l = 0; l < kSub; ++l)
      L[kSub * j + l] = static_cast<std::uint8_t>(clamp(round_half_even((x[kSub * j + l] + offset) / step), 0, nmax));
  }
}

// The 2-bit pairs of Q2_K and Q3_K: in half h of 128 elements, byte 32h + l (l < 32) holds the
// low 2 bits of elements l, l + 32, l + 64, l + 96 of the half, in bits 0-1, 2-3, 4-5, 6-7.
void pack_pairs(const std::uint8_t* L, std::uint8_t* qs) {
  for (std::size_t h = 0; h < 2; ++h) {
    const std::uint8_t* e = L + 128 * h;
    for (std::size_t l = 0; l < 32; ++l)
      qs[32 * h + l] = static_cast<std::uint8_t>((e[l] & 3) | ((e[l + 32] & 3) << 2) | ((e[l + 64] & 3) << 4) |
                                                 ((e[l + 96] & 3) << 6));
  }
}

// The 2 low bits of element e (0 to 255) from the pairs above.
int pair_of(const std::uint8_t* qs, std::size_t e) {
  const std::size_t h = e / 128, k = (e % 128) / 32, l = e % 32;
  return (qs[32 * h + l] >> (2 * k)) & 3;
}

// Q3_K's 6-bit scale code of sub-block j (0 to 15), offset included (0 to 63), from its 12 bytes.
int q3_k_scale(std::size_t j, const std::uint8_t* packed) {
  const int low = j < 8 ? packed[j] & 0x0F : packed[j - 8] >> 4;
  return low | (((packed[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}

}  // namespace

void quantize_block_q8_0(const float* x, std::uint8_t* block) {
  // d = max_j |x_j| / 127, q_j = round(x_j / d) (half away from zero), via id = 1 / d
  float amax = 0.0f;
  for (std::size_t j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  write_fp16(d, block);
  for (std::size_t j = 0; j < kBlock; ++j)
    block[2 + j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(std::round(x[j] * id)));
}

void quantize_block_q4_0(const float* x, std::uint8_t* block) {
  int q[kBlock];
  write_fp16(symmetric_codes(x, 4, q), block);
  pack_nibbles(q, block + 2);
}

void quantize_block_q4_1(const float* x, std::uint8_t* block) {
  int q[kBlock];
  float d = 0.0f, m = 0.0f;
  asymmetric_codes(x, 4, q, d, m);
  write_fp16(d, block);
  write_fp16(m, block + 2);
  pack_nibbles(q, block + 4);
}

void quantize_block_q5_0(const float* x, std::uint8_t* block) {
  int q[kBlock];
  write_fp16(symmetric_codes(x, 5, q), block);
  store_u32(fifth_bits(q), block + 2);
  pack_nibbles(q, block + 6);
}

void quantize_block_q5_1(const float* x, std::uint8_t* block) {
  int q[kBlock];
  float d = 0.0f, m = 0.0f;
  asymmetric_codes(x, 5, q, d, m);
  write_fp16(d, block);
  write_fp16(m, block + 2);
  store_u32(fifth_bits(q), block + 4);
  pack_nibbles(q, block + 8);
}

void quantize_block_q4_k(const float* x, std::uint8_t* block) {
  std::uint8_t L[kSuper];
  // Steps 1 to 4: codes in [0, 15], 21 trial grids (rmin = -1, 20 steps of 0.1)
  affine_super_block(x, 15, -1.0f, 20, block, L);
  // Step 5: the nibbles, in 4 runs of 32 bytes: byte l of run c = q_{64c + l} | q_{64c + 32 + l} << 4
  std::uint8_t* qs = block + 16;
  for (std::size_t c = 0; c < kSuper / 64; ++c)
    for (std::size_t l = 0; l < 32; ++l)
      qs[32 * c + l] = static_cast<std::uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
}

void quantize_block_q5_k(const float* x, std::uint8_t* block) {
  std::uint8_t L[kSuper];
  // Steps 1 to 4: codes in [0, 31], 16 trial grids (rmin = -0.5, 15 steps of 0.1)
  affine_super_block(x, 31, -0.5f, 15, block, L);
  // Step 5: the low 4 bits as Q4_K's nibbles; the fifth bit of element 64c + l in bit 2c of
  // qh[l], that of element 64c + 32 + l in bit 2c + 1
  std::uint8_t* qh = block + 16;
  std::uint8_t* qs = block + 48;
  std::fill(qh, qh + 32, std::uint8_t{0});
  for (std::size_t c = 0; c < kSuper / 64; ++c)
    for (std::size_t l = 0; l < 32; ++l) {
      const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
      qs[32 * c + l] = static_cast<std::uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
      qh[l] = static_cast<std::uint8_t>(qh[l] | ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
    }
}

void quantize_block_q3_k(const float* x, std::uint8_t* block) {
  constexpr std::size_t kSub = 16, kSubs = kSuper / kSub;
  std::uint8_t L[kSuper];  // codes + 4, in [0, 7]
  float scales[kSubs];
  // Step 1: each sub-block's own symmetric fit with 3-bit codes in [-4, 3]; the scale of largest
  // magnitude (with its sign) sets the super-block scale
  for (std::size_t j = 0; j < kSubs; ++j) scales[j] = fit_symmetric_scale_by_descent(x + kSub * j, kSub, 4, L + kSub * j);
  const float max_scale = signed_absmax(scales, kSubs);
  std::uint8_t* hmask = block;
  std::uint8_t* qs = block + 32;
  std::uint8_t* packed = block + 96;
  // Step 2: 6-bit scale codes s_j = clamp(round(iscale scale_j), -32, 31) + 32 with
  // iscale = -32 / max_scale (the largest goes to -32, the end with one more step), d = 1 / iscale
  // in fp16; the low 4 bits of code j in byte j (j < 8) or the high half of byte j - 8, the top 2
  // bits in bits 2 (j / 4), 2 (j / 4) + 1 of byte 8 + j % 4
  std::fill(packed, packed + 12, std::uint8_t{0});
  if (max_scale != 0.0f) {
    const float iscale = -32.0f / max_scale;
    for (std::size_t j = 0; j < kSubs; ++j) {
      const int code = clamp(round_half_even(iscale * scales[j]), -32, 31) + 32;
      if (j < 8) packed[j] = static_cast<std::uint8_t>(code & 0x0F);
      else packed[j - 8] = static_cast<std::uint8_t>(packed[j - 8] | ((code & 0x0F) << 4));
      packed[8 + j % 4] = static_cast<std::uint8_t>(packed[8 + j % 4] | ((code >> 4) << (2 * (j / 4))));
    }
    write_fp16(1.0f / iscale, block + 108);
  } else {
    write_fp16(0.0f, block + 108);
  }
  // Step 3: the codes again on the stored grid: q = round(x / (d (s_j - 32))) clamped to [-4, 3];
  // a sub-block whose step is 0 keeps its codes from step 1
  const float d = read_fp16(block + 108);
  for (std::size_t j = 0; j < kSubs; ++j) {
    const float step = d * static_cast<float>(q3_k_scale(j, packed) - 32);
    if (step == 0.0f) continue;
    for (std::size_t l = 0; l < kSub; ++l)
      L[kSub * j + l] = static_cast<std::uint8_t>(clamp(round_half_even(x[kSub * j + l] / step), -4, 3) + 4);
  }
  // Step 4: the third bit (value 4) of element e into bit e / 32 of hmask[e % 32]; the low 2 bits
  // into the pairs
  std::fill(hmask, hmask + 32, std::uint8_t{0});
  for (std::size_t e = 0; e < kSuper; ++e)
    if (L[e] > 3) {
      hmask[e % 32] = static_cast<std::uint8_t>(hmask[e % 32] | (1u << (e / 32)));
      L[e] = static_cast<std::uint8_t>(L[e] - 4);
    }
  pack_pairs(L, qs);
}

void quantize_block_q2_k(const float* x, std::uint8_t* block) {
  constexpr std::size_t kSub = 16, kSubs = kSuper / kSub;
  std::uint8_t L[kSuper];
  float scales[kSubs], mins[kSubs];
  // Step 1: each sub-block's own affine fit with codes 0..3, weighting element i by |x_i| and
  // scoring the trial grids by the weighted absolute error (16 grids: rmin = -0.5, 15 steps of 0.1)
  float max_scale = 0.0f, max_min = 0.0f;
  for (std::size_t j = 0; j < kSubs; ++j) {
    float weights[kSub];
    for (std::size_t l = 0; l < kSub; ++l) weights[l] = std::fabs(x[kSub * j + l]);
    scales[j] = fit_scale_and_min(x + kSub * j, weights, kSub, 3, -0.5f, 0.1f, 15, true, L + kSub * j, mins[j]);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  std::uint8_t* packed = block;  // byte j: s_j | m_j << 4
  std::uint8_t* qs = block + 16;
  // Step 2: 4-bit codes s_j = round(15 scale_j / max_scale), m_j = round(15 min_j / max_min), and
  // d = max_scale / 15, dmin = max_min / 15 in fp16 (0 when the largest is 0)
  std::fill(packed, packed + kSubs, std::uint8_t{0});
  if (max_scale > 0.0f) {
    const float iscale = 15.0f / max_scale;
    for (std::size_t j = 0; j < kSubs; ++j) packed[j] = static_cast<std::uint8_t>(round_half_even(iscale * scales[j]));
    write_fp16(max_scale / 15.0f, block + 80);
  } else {
    write_fp16(0.0f, block + 80);
  }
  if (max_min > 0.0f) {
    const float iscale = 15.0f / max_min;
    for (std::size_t j = 0; j < kSubs; ++j)
      packed[j] = static_cast<std::uint8_t>(packed[j] | (round_half_even(iscale * mins[j]) << 4));
    write_fp16(max_min / 15.0f, block + 82);
  } else {
    write_fp16(0.0f, block + 82);
  }
  // Step 3: the codes again on the stored grid: q = round((x + dmin m_j) / (d s_j)) clamped to [0, 3];
  // a sub-block whose step is 0 keeps its codes from step 1
  const float d = read_fp16(block + 80), dmin = read_fp16(block + 82);
  for (std::size_t j = 0; j < kSubs; ++j) {
    const float step = d * static_cast<float>(packed[j] & 0x0F);
    if (step == 0.0f) continue;
    const float offset = dmin * static_cast<float>(packed[j] >> 4);
    for (std::size_t l = 0; l < kSub; ++l)
      L[kSub * j + l] = static_cast<std::uint8_t>(clamp(round_half_even((x[kSub * j + l] + offset) / step), 0, 3));
  }
  // Step 4: the 2-bit pairs
  pack_pairs(L, qs);
}

void quantize_block_q6_k(const float* x, std::uint8_t* block) {
  constexpr std::size_t kSub = 16, kSubs = kSuper / kSub;
  std::uint8_t L[kSuper];  // codes + 32, in [0, 63]
  float scales[kSubs];
  // Step 1: each sub-block's own symmetric fit with 6-bit codes in [-32, 31]; the scale of largest
  // magnitude (with its sign) sets the super-block scale
  for (std::size_t j = 0; j < kSubs; ++j) scales[j] = fit_symmetric_scale(x + kSub * j, kSub, 32, L + kSub * j);
  const float max_scale = signed_absmax(scales, kSubs), max_abs_scale = std::fabs(max_scale);
  std::uint8_t* ql = block;
  std::uint8_t* qh = block + 128;
  std::uint8_t* sub_scales = block + 192;
  std::uint8_t* d_bytes = block + 208;
  if (max_abs_scale < 1e-15f) {  // all zero: every byte 0 (d = +0)
    std::fill(block, block + 210, std::uint8_t{0});
    return;
  }
  // Step 2: int8 scale codes s_j = min(127, round(iscale scale_j)) with iscale = -128 / max_scale
  // (the largest goes to -128, the end with one more step), and d = 1 / iscale in fp16
  const float iscale = -128.0f / max_scale;
  write_fp16(1.0f / iscale, d_bytes);
  for (std::size_t j = 0; j < kSubs; ++j)
    sub_scales[j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(std::min(127, round_half_even(iscale * scales[j]))));
  // Step 3: the codes again on the stored grid: q = round(x / (d s_j)) clamped to [-32, 31];
  // a sub-block whose scale code is 0 keeps its codes from step 1 (they decode to 0)
  const float d = read_fp16(d_bytes);
  for (std::size_t j = 0; j < kSubs; ++j) {
    const float step = d * static_cast<float>(static_cast<std::int8_t>(sub_scales[j]));
    if (step == 0.0f) continue;
    for (std::size_t l = 0; l < kSub; ++l)
      L[kSub * j + l] = static_cast<std::uint8_t>(clamp(round_half_even(x[kSub * j + l] / step), -32, 31) + 32);
  }
  // Step 4: split each code into its low 4 bits (ql) and high 2 bits (qh). In half h of 128
  // elements, for l < 32: ql[64h + l] = low(e_l) | low(e_{l+64}) << 4, ql[64h + 32 + l] =
  // low(e_{l+32}) | low(e_{l+96}) << 4, qh[32h + l] = the four high pairs of e_l, e_{l+32}, e_{l+64}, e_{l+96}
  for (std::size_t h = 0; h < 2; ++h) {
    const std::uint8_t* e = L + 128 * h;
    for (std::size_t l = 0; l < 32; ++l) {
      ql[64 * h + l] = static_cast<std::uint8_t>((e[l] & 0x0F) | ((e[l + 64] & 0x0F) << 4));
      ql[64 * h + 32 + l] = static_cast<std::uint8_t>((e[l + 32] & 0x0F) | ((e[l + 96] & 0x0F) << 4));
      qh[32 * h + l] = static_cast<std::uint8_t>((e[l] >> 4) | ((e[l + 32] >> 4) << 2) | ((e[l + 64] >> 4) << 4) |
                                                 ((e[l + 96] >> 4) << 6));
    }
  }
}

int block_code(GgmlType type, const std::uint8_t* block, std::size_t j) {
  switch (type) {
    case GgmlType::q8_0: return static_cast<std::int8_t>(block[2 + j]);
    case GgmlType::q4_0: return code(block + 2, nullptr, j) - 8;
    case GgmlType::q4_1: return code(block + 4, nullptr, j);
    case GgmlType::q5_0: {
      const std::uint32_t qh = load_u32(block + 2);
      return code(block + 6, &qh, j) - 16;
    }
    case GgmlType::q5_1: {
      const std::uint32_t qh = load_u32(block + 4);
      return code(block + 8, &qh, j);
    }
    default: break;
  }
  fail("block_code", "type (", type_name(type), ") is not one of the 32-weight block types");
}

void dequantize_block(GgmlType type, const std::uint8_t* block, float* y) {
  const float d = read_fp16(block);
  switch (type) {
    case GgmlType::q8_0:  // x^_j = d q_j, d (q_j - 8), d (q_j - 16): a product
    case GgmlType::q4_0:
    case GgmlType::q5_0:
      for (std::size_t j = 0; j < kBlock; ++j) y[j] = d * static_cast<float>(block_code(type, block, j));
      return;
    case GgmlType::q4_1:  // x^_j = d q_j + m: a product, then a sum
    case GgmlType::q5_1: {
      const float m = read_fp16(block + 2);
      for (std::size_t j = 0; j < kBlock; ++j) y[j] = d * static_cast<float>(block_code(type, block, j)) + m;
      return;
    }
    case GgmlType::q4_K:    // x^ = d s_j q - dmin m_j, q the nibble
    case GgmlType::q5_K: {  // the same, q = nibble | fifth bit << 4 (the fifth bits before the nibbles)
      const float dmin = read_fp16(block + 2);
      const bool fifth_bits = type == GgmlType::q5_K;
      const std::uint8_t* qh = block + 16;  // q5_K only
      const std::uint8_t* qs = block + (fifth_bits ? 48 : 16);
      for (std::size_t j = 0; j < kSuper / 32; ++j) {
        int sc = 0, m = 0;
        q4_k_scale_min(j, block + 4, sc, m);
        const float step = d * static_cast<float>(sc), offset = dmin * static_cast<float>(m);
        // sub-block j: run j / 2 of the nibbles, low halves for even j, high halves for odd j (its
        // fifth bits in bit j of qh)
        const std::uint8_t* run = qs + 32 * (j / 2);
        for (std::size_t l = 0; l < 32; ++l) {
          const int low = j % 2 == 0 ? run[l] & 0x0F : run[l] >> 4;
          const int q = fifth_bits ? low + (((qh[l] >> j) & 1) << 4) : low;
          y[32 * j + l] = step * static_cast<float>(q) - offset;
        }
      }
      return;
    }
    case GgmlType::q3_K: {  // x^ = d (s_j - 32) (q - 4), q = low pair | third bit << 2
      const float d3 = read_fp16(block + 108);
      for (std::size_t e = 0; e < kSuper; ++e) {
        const float step = d3 * static_cast<float>(q3_k_scale(e / 16, block + 96) - 32);
        const int third = (block[e % 32] >> (e / 32)) & 1;
        y[e] = step * static_cast<float>(pair_of(block + 32, e) + 4 * third - 4);
      }
      return;
    }
    case GgmlType::q2_K: {  // x^ = d s_j q - dmin m_j, byte j of the scales = s_j | m_j << 4
      const float d2 = read_fp16(block + 80), dmin = read_fp16(block + 82);
      for (std::size_t e = 0; e < kSuper; ++e) {
        const std::uint8_t sm = block[e / 16];
        const float step = d2 * static_cast<float>(sm & 0x0F), offset = dmin * static_cast<float>(sm >> 4);
        y[e] = step * static_cast<float>(pair_of(block + 16, e)) - offset;
      }
      return;
    }
    case GgmlType::q6_K: {  // x^ = d s_j (q - 32), q = low 4 bits | high 2 bits << 4
      const float d6 = read_fp16(block + 208);
      const auto* sc = reinterpret_cast<const std::int8_t*>(block + 192);
      // half h, byte l < 32: the four elements e = l + 32 k (k = 0..3) of the layout's groups
      for (std::size_t h = 0; h < 2; ++h) {
        const std::uint8_t* ql = block + 64 * h;
        const std::uint8_t* qh = block + 128 + 32 * h;
        float* out = y + 128 * h;
        for (std::size_t l = 0; l < 32; ++l)
          for (std::size_t k = 0; k < 4; ++k) {
            const std::uint8_t low_byte = ql[l + 32 * (k % 2)];
            const int low = k < 2 ? low_byte & 0x0F : low_byte >> 4;
            const int high = (qh[l] >> (2 * k)) & 3;
            const std::size_t e = l + 32 * k;
            out[e] = d6 * static_cast<float>(sc[8 * h + e / 16]) * static_cast<float>((low | high << 4) - 32);
          }
      }
      return;
    }
    default: break;
  }
  fail("dequantize_block", "type (", type_name(type), ") is not a block type: use one of quantized_types()");
}

double largest_quantizable(GgmlType type) {
  constexpr double kFp16Max = 65504.0;  // fp16's largest finite value: the largest scale a block can store
  switch (type) {
    case GgmlType::q8_0: return 127.0 * kFp16Max;  // d = max|x| / 127
    case GgmlType::q4_0: return 8.0 * kFp16Max;    // d = x_max / -8
    case GgmlType::q5_0: return 16.0 * kFp16Max;   // d = x_max / -16
    // Q4_1 and Q5_1 store the minimum in fp16 too (and then d = range / 15 or 31 fits); the K-quants'
    // super-block scales are fp16 and smaller than the weights they scale: a safe bound for them
    default: return kFp16Max;
  }
}

void quantize_block(GgmlType type, const float* x, std::uint8_t* block) {
  switch (type) {
    case GgmlType::q8_0: quantize_block_q8_0(x, block); return;
    case GgmlType::q4_0: quantize_block_q4_0(x, block); return;
    case GgmlType::q4_1: quantize_block_q4_1(x, block); return;
    case GgmlType::q5_0: quantize_block_q5_0(x, block); return;
    case GgmlType::q5_1: quantize_block_q5_1(x, block); return;
    case GgmlType::q2_K: quantize_block_q2_k(x, block); return;
    case GgmlType::q3_K: quantize_block_q3_k(x, block); return;
    case GgmlType::q4_K: quantize_block_q4_k(x, block); return;
    case GgmlType::q5_K: quantize_block_q5_k(x, block); return;
    case GgmlType::q6_K: quantize_block_q6_k(x, block); return;
    default: break;
  }
  fail("quantize_block", "type (", type_name(type), ") is not a block type: use one of quantized_types()");
}

void validate_quantize(const char* function, const Tensor2& x, GgmlType type, bool scan_values) {
  if (std::find(quantized_types().begin(), quantized_types().end(), type) == quantized_types().end()) {
    std::string known;
    for (GgmlType t : quantized_types()) known += (known.empty() ? "" : ", ") + type_name(t);
    fail(function, "type (", type_name(type), ") is not a block type: one of ", known);
  }
  require_nonempty(function, "x", x);
  require_block_multiple(function, "x's row length", x.shape()[1], type);
  if (!scan_values) return;
  // beyond this magnitude the block's fp16 scale would be infinite (ggml would store inf, and the
  // values would come back as inf or NaN)
  if (require_finite_max_abs(function, "x", x) > largest_quantizable(type))
    for (std::size_t i = 0; i < x.size(); ++i)
      if (std::fabs(x.data()[i]) > largest_quantizable(type))
        fail(function, "x has a value of magnitude ", std::fabs(x.data()[i]), " at (row ", i / x.shape()[1], ", col ",
             i % x.shape()[1], "); ", type_name(type), " stores its scales in fp16 (at most 65504), so |x| must not exceed ",
             largest_quantizable(type), ": scale the tensor down first");
}

QuantizedMatrix quantize(const Tensor2& x, GgmlType type) {
  validate_quantize("quantize", x, type);
  QuantizedMatrix q{type, x.shape()[0], x.shape()[1], {}};
  q.bytes.resize(q.rows * q.row_bytes());
  const std::size_t n = block_size(type);
  for (std::size_t r = 0; r < q.rows; ++r)
    for (std::size_t b = 0; b < q.cols / n; ++b) quantize_block(type, &x(r, b * n), q.row(r) + b * block_bytes(type));
  return q;
}

void validate_dequantize(const char* function, const QuantizedMatrix& q) {
  validate_quantized(function, q);
  require(q.type != GgmlType::f32 && q.type != GgmlType::f16, function, "q.type (", type_name(q.type),
          ") is not a block type");
}

Tensor2 dequantize(const QuantizedMatrix& q) {
  validate_dequantize("dequantize", q);
  Tensor2 y = Tensor2::from_shape({q.rows, q.cols});
  const std::size_t n = block_size(q.type);
  for (std::size_t r = 0; r < q.rows; ++r)
    for (std::size_t b = 0; b < q.cols / n; ++b) dequantize_block(q.type, q.row(r) + b * block_bytes(q.type), &y(r, b * n));
  return y;
}

}  // namespace tvlab::ref
