#include "tvlab/ref/mla_decode.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"

namespace tvlab::ref {

double validate_mla_decode_attention(const char* fn, const Tensor2& q_absorbed, const Tensor2& latents,
                                     const Tensor2& rope_keys, std::size_t length, double scale) {
  require_nonempty(fn, "q_absorbed", q_absorbed);
  require_nonempty(fn, "latents", latents);
  require_nonempty(fn, "rope_keys", rope_keys);
  const std::size_t capacity = latents.shape()[0], d_c = latents.shape()[1], d_r = rope_keys.shape()[1];
  require_dim(fn, "rope_keys", rope_keys, 0, "rows", capacity, "the rows of latents, the cache's capacity");
  require_dim(fn, "q_absorbed", q_absorbed, 1, "columns", d_c + d_r,
              "d_c + d_h^R: the columns of latents plus those of rope_keys");
  require(length >= 1 && length <= capacity, fn, "length (", length, ") must be in [1, capacity = ", capacity,
          "], the rows of latents");
  require(std::isfinite(scale) && scale > 0.0 && scale <= std::numeric_limits<float>::max(), fn, "scale (", scale,
          ") must be positive and representable in float");
  return require_finite_max_abs(fn, "q_absorbed", q_absorbed);
}

void check_mla_decode_cache(const char* fn, const Tensor2& latents, const Tensor2& rope_keys, std::size_t length,
                            double q_max, double scale) {
  const std::size_t d_c = latents.shape()[1], d_r = rope_keys.shape()[1];
  // Only the first `length` rows are cached tokens; the others are free slots, never read.
  double key_max = 0.0;
  for (std::size_t j = 0; j < length; ++j) {
    for (std::size_t c = 0; c < d_c; ++c) {
      require(std::isfinite(latents(j, c)), fn, "latents has a non-finite value (", latents(j, c), ") at position ", j,
              ", column ", c);
      key_max = std::max(key_max, static_cast<double>(std::fabs(latents(j, c))));
    }
    for (std::size_t e = 0; e < d_r; ++e) {
      require(std::isfinite(rope_keys(j, e)), fn, "rope_keys has a non-finite value (", rope_keys(j, e),
              ") at position ", j, ", column ", e);
      key_max = std::max(key_max, static_cast<double>(std::fabs(rope_keys(j, e))));
    }
  }
  // As chapter 00's validate_attention: |q^ . k| <= (d_c + d_h^R) max|q^| max|k|, and its scaled
  // value, must stay inside float's range (3.4e38; 1e38 leaves room for rounding).
  const double dot_bound = static_cast<double>(d_c + d_r) * q_max * key_max;
  require(dot_bound <= 1e38 && scale * dot_bound <= 1e38, fn,
          "q_absorbed and the cached latents and rope_keys are too large: scale * q . k could reach ",
          scale * dot_bound, ", beyond float's range (3.4e38); scale them down");
}

MlaDecodeAttention mla_absorbed_decode_attention(const Tensor2& q_absorbed, const Tensor2& latents,
                                                 const Tensor2& rope_keys, std::size_t length, double scale) {
  const char* fn = "mla_absorbed_decode_attention";
  const double q_max = validate_mla_decode_attention(fn, q_absorbed, latents, rope_keys, length, scale);
  check_mla_decode_cache(fn, latents, rope_keys, length, q_max, scale);
  const std::size_t heads = q_absorbed.shape()[0], d_c = latents.shape()[1], d_r = rope_keys.shape()[1];

  MlaDecodeAttention result{Tensor2::from_shape({heads, d_c}), Tensor1::from_shape({heads})};
  std::vector<double> s(length);  // head i's scores, then its weights e^{s_ij - m}
  std::vector<double> a(d_c);     // head i's weighted latent
  for (std::size_t i = 0; i < heads; ++i) {
    // s_ij = scale (q~_i . c^KV_j + q^R_i . k^R_j): the latent part and the RoPE part of one dot product
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < length; ++j) {
      double dot = 0.0;
      for (std::size_t c = 0; c < d_c; ++c) dot += static_cast<double>(q_absorbed(i, c)) * latents(j, c);
      for (std::size_t e = 0; e < d_r; ++e) dot += static_cast<double>(q_absorbed(i, d_c + e)) * rope_keys(j, e);
      s[j] = scale * dot;
      m = std::max(m, s[j]);
    }
    // l_i = sum_j e^{s_ij - m_i} (the maximum subtracted so that no exponential overflows)
    double l = 0.0;
    for (std::size_t j = 0; j < length; ++j) {
      s[j] = std::exp(s[j] - m);
      l += s[j];
    }
    // a_i = sum_j (e^{s_ij - m_i} / l_i) c^KV_j: the same latents every head reads, weighted per head
    std::fill(a.begin(), a.end(), 0.0);
    for (std::size_t j = 0; j < length; ++j)
      for (std::size_t c = 0; c < d_c; ++c) a[c] += s[j] / l * latents(j, c);
    for (std::size_t c = 0; c < d_c; ++c) result.out_latent(i, c) = static_cast<float>(a[c]);
    // L_i = ln sum_j e^{s_ij} = m_i + ln l_i
    result.lse(i) = static_cast<float>(m + std::log(l));
  }
  return result;
}

}  // namespace tvlab::ref
