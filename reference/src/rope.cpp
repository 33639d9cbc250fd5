#include "tvlab/ref/rope.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "tvlab/core/error.hpp"

namespace tvlab::ref {
namespace {

// theta_i = base^(-2i/d) for i = 0 .. d/2 - 1.
DTensor1 default_inverse_frequencies(int head_dim, double base) {
  const auto pairs = static_cast<std::size_t>(head_dim / 2);
  DTensor1 inv_freq = DTensor1::from_shape({pairs});
  for (std::size_t i = 0; i < pairs; ++i)
    inv_freq(i) = 1.0 / std::pow(base, 2.0 * static_cast<double>(i) / head_dim);
  return inv_freq;
}

// YaRN's attention temperature: sqrt(1/t) = 0.1 ln(s) + 1 (times mscale, DeepSeek's knob).
double yarn_get_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// The (fractional) pair index whose wavelength 2 pi / theta_i fits `rotations` times into the
// original length L: solve L / (2 pi base^(2i/d)) = rotations for i.
double yarn_correction_dim(double rotations, int head_dim, double base, double original_length) {
  return head_dim * std::log(original_length / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
}

}  // namespace

double ntk_aware_base(double base, double alpha, int head_dim) {
  const char* fn = "ntk_aware_base";
  require(std::isfinite(base) && base > 1.0, fn, "base (", base, ") must be finite and > 1");
  require(std::isfinite(alpha) && alpha >= 1.0, fn, "alpha (", alpha, ") must be finite and >= 1");
  require(head_dim > 2 && head_dim % 2 == 0, fn, "head_dim (", head_dim, ") must be even and > 2");
  // beta' = beta * alpha^(d / (d - 2))
  return base * std::pow(alpha, static_cast<double>(head_dim) / (head_dim - 2));
}

RopeFrequencies rope_frequencies(const RopeConfig& cfg, long long seq_len) {
  const char* fn = "rope_frequencies";
  validate_rope_config(fn, cfg);
  require(seq_len >= 0, fn, "seq_len (", seq_len, ") must be >= 0 (0: no length given)");
  const RopeScaling& sc = cfg.rope_scaling;
  // d: the rotated coordinates (head_dim unless partial_rotary_factor < 1); the exponents are 2i / d.
  const int d = rotary_dim(cfg);
  const double s = sc.factor;
  // L: the pre-training length the scaling is measured against (yarn, llama3, longrope).
  const double original_length = static_cast<double>(
      sc.original_max_position_embeddings > 0 ? sc.original_max_position_embeddings : cfg.max_position_embeddings);

  RopeFrequencies out{default_inverse_frequencies(d, cfg.rope_theta), 1.0};
  if (sc.rope_type == "linear") {
    // Position interpolation: positions m -> m / s, i.e. theta_i -> theta_i / s.
    out.inv_freq /= s;
  } else if (sc.rope_type == "dynamic") {
    // NTK-aware base for the current length n (no change up to L):
    // beta' = beta * (s n / L - (s - 1))^(d / (d - 2)). As in Hugging Face, L is
    // max_position_embeddings here (original_max_position_embeddings is not used).
    const double trained = static_cast<double>(cfg.max_position_embeddings);
    const double n = std::max(static_cast<double>(seq_len > 0 ? seq_len : cfg.max_position_embeddings), trained);
    const double base = cfg.rope_theta * std::pow(s * n / trained - (s - 1.0), static_cast<double>(d) / (d - 2));
    out.inv_freq = default_inverse_frequencies(d, base);
  } else if (sc.rope_type == "yarn") {
    // Correction range in pair indices, from the ORIGINAL length: pairs that rotate more than
    // beta_fast times in L keep theta_i (extrapolate), fewer than beta_slow times use theta_i / s
    // (interpolate), a linear ramp in between. With truncate (the default) the ends are rounded
    // outwards to whole pairs, as the YaRN paper's code does; without, the ramp starts and ends
    // at the fractional indices.
    double low = yarn_correction_dim(sc.beta_fast, d, cfg.rope_theta, original_length);
    double high = yarn_correction_dim(sc.beta_slow, d, cfg.rope_theta, original_length);
    if (sc.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(d - 1));
    if (high == low) high += 0.001;  // avoid a zero-width ramp
    for (std::size_t i = 0; i < out.inv_freq.size(); ++i) {
      // gamma_i = 1 - clamp((i - low) / (high - low), 0, 1): 1 = extrapolate, 0 = interpolate.
      const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
      const double gamma = 1.0 - ramp;
      const double theta = out.inv_freq(i);
      out.inv_freq(i) = theta / s * (1.0 - gamma) + theta * gamma;
    }
    if (sc.attention_factor) {
      out.attention_factor = *sc.attention_factor;
    } else if (sc.mscale && sc.mscale_all_dim && *sc.mscale != 0.0 && *sc.mscale_all_dim != 0.0) {
      out.attention_factor = yarn_get_mscale(s, *sc.mscale) / yarn_get_mscale(s, *sc.mscale_all_dim);
    } else {
      out.attention_factor = yarn_get_mscale(s, 1.0);
    }
  } else if (sc.rope_type == "llama3") {
    // Llama 3.1's smoothing, by wavelength lambda_i = 2 pi / theta_i against L:
    //   lambda_i < L / high_freq_factor: theta_i (fast pairs, many turns in L, kept);
    //   lambda_i > L / low_freq_factor:  theta_i / s (slow pairs, interpolated);
    //   between: (1 - g) theta_i / s + g theta_i with g = (L / lambda_i - low) / (high - low),
    // which is 1 at the first boundary and 0 at the second, so theta'_i is continuous.
    const double low = sc.low_freq_factor, high = sc.high_freq_factor;
    for (std::size_t i = 0; i < out.inv_freq.size(); ++i) {
      const double theta = out.inv_freq(i);
      const double wavelength = 2.0 * std::numbers::pi / theta;
      if (wavelength < original_length / high) continue;
      if (wavelength > original_length / low) {
        out.inv_freq(i) = theta / s;
        continue;
      }
      const double g = (original_length / wavelength - low) / (high - low);
      out.inv_freq(i) = (1.0 - g) * theta / s + g * theta;
    }
  } else if (sc.rope_type == "longrope") {
    // LongRoPE (Ding et al. 2024): a searched divisor per pair, theta_i / lambda_i, with the short
    // list for sequences up to L and the long list beyond (seq_len 0: no length given, short);
    // cos and sin are scaled by sqrt(1 + ln s / ln L) (1 for s <= 1) unless attention_factor is given.
    const std::vector<double>& lambda = seq_len > static_cast<long long>(original_length) ? sc.long_factor
                                                                                          : sc.short_factor;
    for (std::size_t i = 0; i < out.inv_freq.size(); ++i) out.inv_freq(i) /= lambda[i];
    if (sc.attention_factor)
      out.attention_factor = *sc.attention_factor;
    else if (s > 1.0)
      out.attention_factor = std::sqrt(1.0 + std::log(s) / std::log(original_length));
  }
  return out;
}

double deepseek_softmax_scale_factor(const RopeScaling& sc) {
  if (sc.rope_type == "default" || !sc.mscale_all_dim || *sc.mscale_all_dim == 0.0) return 1.0;
  require(std::isfinite(sc.factor) && sc.factor >= 1.0, "deepseek_softmax_scale_factor", "rope_scaling.factor (",
          sc.factor, ") must be finite and >= 1");
  require(std::isfinite(*sc.mscale_all_dim) && *sc.mscale_all_dim > 0.0, "deepseek_softmax_scale_factor",
          "rope_scaling.mscale_all_dim (", *sc.mscale_all_dim, ") must be finite and > 0 (0 or unset: no factor)");
  const double m = yarn_get_mscale(sc.factor, *sc.mscale_all_dim);
  return m * m;
}

Tensor3 apply_rope(const Tensor3& x, const RopeFrequencies& freqs, RopeLayout layout, long long position_offset) {
  validate_rope_input("apply_rope", x, freqs, position_offset);
  const std::size_t heads = x.shape()[0], seq = x.shape()[1];
  // The rotated pairs: head_dim / 2, or fewer when only the first 2 * pairs coordinates rotate.
  const std::size_t pairs = freqs.inv_freq.size();
  Tensor3 y = x;  // the coordinates past 2 * pairs pass through unchanged
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t t = 0; t < seq; ++t) {
      const double m = static_cast<double>(position_offset) + static_cast<double>(t);
      for (std::size_t i = 0; i < pairs; ++i) {
        // The pair (a, b) rotated by the angle m * theta_i.
        const std::size_t a = layout == RopeLayout::interleaved ? 2 * i : i;
        const std::size_t b = layout == RopeLayout::interleaved ? 2 * i + 1 : i + pairs;
        const double angle = m * freqs.inv_freq(i);
        const double c = std::cos(angle) * freqs.attention_factor, s = std::sin(angle) * freqs.attention_factor;
        const double xa = x(h, t, a), xb = x(h, t, b);
        y(h, t, a) = static_cast<float>(xa * c - xb * s);
        y(h, t, b) = static_cast<float>(xa * s + xb * c);
      }
    }
  return y;
}

}  // namespace tvlab::ref
