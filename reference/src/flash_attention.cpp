#include "tvlab/ref/flash_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/dtype.hpp"

namespace tvlab::ref {
namespace {

// x rounded to E4M3 and back, after scaling each group of rows so its largest |x| maps to 448:
// all of x (per tensor) or `block_rows` rows of one head at a time (per block). Returns the
// dequantized values x8 / scale, which is what an FP8 tensor-core product sees.
Tensor3 through_e4m3(const Tensor3& x, Fp8Scaling scaling, std::size_t block_rows) {
  const std::size_t heads = x.shape()[0], seq = x.shape()[1], width = x.shape()[2];
  Tensor3 y = x;
  auto quantize_group = [&](std::size_t first, std::size_t count) {  // `count` floats from `first`
    double amax = 0.0;
    for (std::size_t t = first; t < first + count; ++t) amax = std::max(amax, std::fabs(static_cast<double>(x.data()[t])));
    if (amax == 0.0) return;
    // In double: 448 / amax overflows float for amax below about 1e-36.
    const double scale = kE4m3Max / amax;
    for (std::size_t t = first; t < first + count; ++t)
      y.data()[t] = static_cast<float>(round_to_e4m3(static_cast<float>(x.data()[t] * scale)) / scale);
  };
  if (scaling == Fp8Scaling::per_tensor) {
    quantize_group(0, x.size());
  } else {
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t r0 = 0; r0 < seq; r0 += block_rows)
        quantize_group((h * seq + r0) * width, std::min(block_rows, seq - r0) * width);
  }
  return y;
}

// x with every element rounded to a 16-bit format and back: what a tensor core reads.
Tensor3 through_16_bits(const Tensor3& x, FlashInputs inputs) {
  Tensor3 y = x;
  for (float& value : y) value = round_to_inputs(value, inputs);
  return y;
}

float p_to_e4m3(float p) { return round_to_e4m3(p); }
float p_to_fp16(float p) { return round_to_fp16(p); }
float p_to_bf16(float p) { return round_to_bf16(p); }

// The tiled loop of Algorithm 1 on checked inputs; `round_p`, when given, rounds P~ to the
// low-precision format before the P~ V product (FP8, fp16 or bf16 emulation).
FlashOutput forward_tiles(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg, double scale,
                          float (*round_p)(float)) {
  const std::size_t heads = q.shape()[0], seq_q = q.shape()[1], d = q.shape()[2];
  const std::size_t seq_k = k.shape()[1], d_v = v.shape()[2];
  const double neg_inf = -std::numeric_limits<double>::infinity();
  const AttentionMask& mask = cfg.mask;

  FlashOutput result{Tensor3::from_shape({heads, seq_q, d_v}), Tensor2::from_shape({heads, seq_q}), 0, 0};
  for (std::size_t h = 0; h < heads; ++h) {
    for (std::size_t r0 = 0; r0 < seq_q; r0 += cfg.block_q) {  // query tile Q_i: rows [r0, r1)
      const std::size_t r1 = std::min(seq_q, r0 + cfg.block_q), rows = r1 - r0;
      // Per row of the tile: m = -inf, l = 0, O~ = 0.
      std::vector<double> m(rows, neg_inf), l(rows, 0.0), o(rows * d_v, 0.0);
      // The keys the causal rule and the window leave to some row of the tile: [keys.begin, keys.end).
      const IndexRange keys = mask.key_range_of_rows(r0, r1, seq_q, seq_k);
      for (std::size_t c0 = 0; c0 < seq_k; c0 += cfg.block_k) {  // key/value tile K_j, V_j: rows [c0, c1)
        const std::size_t c1 = std::min(seq_k, c0 + cfg.block_k), cols = c1 - c0;
        // A key tile outside that range is masked for every row of the query tile: skipped whole.
        if (c1 <= keys.begin || c0 >= keys.end) {
          ++result.tiles_skipped;
          continue;
        }
        ++result.tiles_computed;
        for (std::size_t r = 0; r < rows; ++r) {
          const std::size_t i = r0 + r;
          // S = scale * q_i K_j^T + b_ij - m_h |i' - j|, -inf where the mask hides the key.
          std::vector<double> s(cols, neg_inf);
          double tile_max = neg_inf;
          for (std::size_t c = 0; c < cols; ++c) {
            const std::size_t j = c0 + c;
            if (!mask.allows(i, j, seq_q, seq_k)) continue;
            double dot = 0.0;
            for (std::size_t e = 0; e < d; ++e) dot += static_cast<double>(q(h, i, e)) * k(h, j, e);
            s[c] = scale * dot + mask.score_bias(h, i, j, seq_q, seq_k);
            tile_max = std::max(tile_max, s[c]);
          }
          // m' = max(m, rowmax(S)); nothing to add when the whole row of the tile is masked.
          const double m_new = std::max(m[r], tile_max);
          if (m_new == neg_inf) continue;
          // P~ = e^{S - m'}; l' = e^{m - m'} l + rowsum(P~); O~' = e^{m - m'} O~ + P~ V_j.
          const double correction = m[r] == neg_inf ? 0.0 : std::exp(m[r] - m_new);
          l[r] *= correction;
          for (std::size_t e = 0; e < d_v; ++e) o[r * d_v + e] *= correction;
          for (std::size_t c = 0; c < cols; ++c) {
            if (s[c] == neg_inf) continue;
            const double p = std::exp(s[c] - m_new);
            l[r] += p;  // the row sum from the unrounded weights (FlashAttention-3 does the same)
            // Low-precision emulation: the P~ V product sees P~ in the format (P~ <= 1 needs no scale).
            const double p_used = round_p ? static_cast<double>(round_p(static_cast<float>(p))) : p;
            for (std::size_t e = 0; e < d_v; ++e) o[r * d_v + e] += p_used * v(h, c0 + c, e);
          }
          m[r] = m_new;
        }
      }
      // O_i = O~ / l; L_i = m + ln l (a row that saw no key: O = 0, L = -inf).
      for (std::size_t r = 0; r < rows; ++r) {
        const bool seen = l[r] > 0.0;
        for (std::size_t e = 0; e < d_v; ++e)
          result.out(h, r0 + r, e) = seen ? static_cast<float>(o[r * d_v + e] / l[r]) : 0.0f;
        result.lse(h, r0 + r) = seen ? static_cast<float>(m[r] + std::log(l[r])) : -std::numeric_limits<float>::infinity();
      }
    }
  }
  return result;
}

}  // namespace

FlashOutput flash_attention_forward(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg) {
  const double scale = validate_flash("flash_attention_forward", q, k, v, cfg);
  if (cfg.fp8 != Fp8Scaling::none) {
    // FP8 emulation: run on the values the FP8 tensors hold (P~ is rounded in the loop below).
    FlashConfig inner = cfg;
    inner.fp8 = Fp8Scaling::none;
    return forward_tiles(through_e4m3(q, cfg.fp8, cfg.block_q), through_e4m3(k, cfg.fp8, cfg.block_k),
                         through_e4m3(v, cfg.fp8, cfg.block_k), inner, scale, p_to_e4m3);
  }
  if (cfg.inputs != FlashInputs::fp32) {
    // Tensor-core emulation: Q, K, V in fp16 or bf16 (no scale: the formats' range suffices), P~
    // rounded in the loop; the products' sums and the softmax in double.
    return forward_tiles(through_16_bits(q, cfg.inputs), through_16_bits(k, cfg.inputs), through_16_bits(v, cfg.inputs),
                         cfg, scale, cfg.inputs == FlashInputs::fp16 ? p_to_fp16 : p_to_bf16);
  }
  return forward_tiles(q, k, v, cfg, scale, nullptr);
}


FlashGrads flash_attention_backward(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor3& out,
                                    const Tensor2& lse, const Tensor3& dout, const FlashConfig& cfg) {
  const double scale = validate_flash_backward("flash_attention_backward", q, k, v, out, lse, dout, cfg);
  const std::size_t heads = q.shape()[0], seq_q = q.shape()[1], d = q.shape()[2];
  const std::size_t seq_k = k.shape()[1], d_v = v.shape()[2];
  const AttentionMask& mask = cfg.mask;
  std::vector<double> dq(heads * seq_q * d, 0.0), dk(heads * seq_k * d, 0.0), dv(heads * seq_k * d_v, 0.0);

  for (std::size_t h = 0; h < heads; ++h) {
    // D_i = rowsum(dO_i o O_i): the term that the softmax's Jacobian subtracts.
    std::vector<double> delta(seq_q, 0.0);
    for (std::size_t i = 0; i < seq_q; ++i)
      for (std::size_t e = 0; e < d_v; ++e) delta[i] += static_cast<double>(dout(h, i, e)) * out(h, i, e);
    for (std::size_t c0 = 0; c0 < seq_k; c0 += cfg.block_k) {  // key/value tile j: rows [c0, c1)
      const std::size_t c1 = std::min(seq_k, c0 + cfg.block_k);
      for (std::size_t r0 = 0; r0 < seq_q; r0 += cfg.block_q) {  // query tile i: rows [r0, r1)
        const std::size_t r1 = std::min(seq_q, r0 + cfg.block_q);
        const IndexRange keys = mask.key_range_of_rows(r0, r1, seq_q, seq_k);
        if (c1 <= keys.begin || c0 >= keys.end) continue;  // the causal rule or the window hides the whole tile
        for (std::size_t i = r0; i < r1; ++i) {
          if (lse(h, i) == -std::numeric_limits<float>::infinity()) continue;  // saw no key: no gradient
          for (std::size_t j = c0; j < c1; ++j) {
            if (!mask.allows(i, j, seq_q, seq_k)) continue;
            // P_ij = e^{S_ij - L_i}, recomputed from q, k, the mask's bias and the saved L.
            double dot = 0.0;
            for (std::size_t e = 0; e < d; ++e) dot += static_cast<double>(q(h, i, e)) * k(h, j, e);
            const double p = std::exp(scale * dot + mask.score_bias(h, i, j, seq_q, seq_k) - static_cast<double>(lse(h, i)));
            // dV_j += P_ij dO_i;  dP_ij = dO_i . V_j.
            double dp = 0.0;
            for (std::size_t e = 0; e < d_v; ++e) {
              dv[(h * seq_k + j) * d_v + e] += p * dout(h, i, e);
              dp += static_cast<double>(dout(h, i, e)) * v(h, j, e);
            }
            // dS_ij = P_ij (dP_ij - D_i); dQ_i += scale dS_ij K_j; dK_j += scale dS_ij Q_i.
            const double ds = p * (dp - delta[i]);
            for (std::size_t e = 0; e < d; ++e) {
              dq[(h * seq_q + i) * d + e] += scale * ds * k(h, j, e);
              dk[(h * seq_k + j) * d + e] += scale * ds * q(h, i, e);
            }
          }
        }
      }
    }
  }
  auto to_float = [](const std::vector<double>& x, std::size_t a, std::size_t b, std::size_t c) {
    Tensor3 t = Tensor3::from_shape({a, b, c});
    std::transform(x.begin(), x.end(), t.begin(), [](double value) { return static_cast<float>(value); });
    return t;
  };
  return {to_float(dq, heads, seq_q, d), to_float(dk, heads, seq_k, d), to_float(dv, heads, seq_k, d_v)};
}

}  // namespace tvlab::ref
