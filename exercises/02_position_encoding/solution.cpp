// Chapter 02 exercises: worked solutions. Each marked region is what a student writes;
// scripts/make_student.py turns this file into student.cpp with the regions replaced by
// NotImplemented stubs. Edit this file, then regenerate (`make student-stubs`).

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/student/alibi.hpp"
#include "tvlab/student/rope.hpp"

namespace tvlab::student {

Tensor3 apply_rope(const Tensor3& x, const RopeFrequencies& freqs, RopeLayout layout, long long position_offset) {
  // BEGIN EXERCISE 02.1 "RoPE in both layouts" "RoPE: rotating pairs"
  validate_rope_input("apply_rope", x, freqs, position_offset);
  // pairs: one per frequency (fewer than head_dim / 2 rotate only the first 2 * pairs coordinates).
  const std::size_t heads = x.shape()[0], seq = x.shape()[1], pairs = freqs.inv_freq.size();
  Tensor3 y = x;  // coordinates past 2 * pairs pass through
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t t = 0; t < seq; ++t)
      for (std::size_t i = 0; i < pairs; ++i) {
        // Pair (a, b): (2i, 2i+1) interleaved, (i, i + d/2) half split; angle m theta_i in double.
        const std::size_t a = layout == RopeLayout::interleaved ? 2 * i : i;
        const std::size_t b = layout == RopeLayout::interleaved ? 2 * i + 1 : i + pairs;
        const double angle = static_cast<double>(position_offset + static_cast<long long>(t)) * freqs.inv_freq(i);
        const double c = std::cos(angle) * freqs.attention_factor, s = std::sin(angle) * freqs.attention_factor;
        const double xa = x(h, t, a), xb = x(h, t, b);
        y(h, t, a) = static_cast<float>(xa * c - xb * s);
        y(h, t, b) = static_cast<float>(xa * s + xb * c);
      }
  return y;
  // END EXERCISE
}

RopeFrequencies rope_frequencies(const RopeConfig& cfg, long long seq_len) {
  // Exercise 02.3 covers the four classic types over whole heads; llama3, longrope and partial
  // rotation are left to ref::rope_frequencies.
  const std::string& type = cfg.rope_scaling.rope_type;
  require(type != "llama3" && type != "longrope", "rope_frequencies", "rope_scaling.rope_type ('",
          type, "') is not part of exercise 02.3 (default, linear, dynamic, yarn)");
  require(cfg.partial_rotary_factor == 1.0, "rope_frequencies", "partial_rotary_factor (", cfg.partial_rotary_factor,
          ") other than 1 is not part of exercise 02.3");
  // BEGIN EXERCISE 02.3 "inverse frequencies: default, linear, dynamic, yarn" "Context extension: PI, NTK-aware, dynamic NTK, YaRN"
  validate_rope_config("rope_frequencies", cfg);
  require(seq_len >= 0, "rope_frequencies", "seq_len (", seq_len, ") must be >= 0 (0: max_position_embeddings)");
  const RopeScaling& sc = cfg.rope_scaling;
  const int d = cfg.head_dim;
  const double s = sc.factor;
  const double L = static_cast<double>(sc.original_max_position_embeddings > 0 ? sc.original_max_position_embeddings
                                                                              : cfg.max_position_embeddings);
  auto frequencies = [d](double base) {
    DTensor1 f = DTensor1::from_shape({static_cast<std::size_t>(d / 2)});
    for (std::size_t i = 0; i < f.size(); ++i) f(i) = std::pow(base, -2.0 * static_cast<double>(i) / d);
    return f;
  };
  RopeFrequencies out{frequencies(cfg.rope_theta), 1.0};
  if (sc.rope_type == "linear") {
    out.inv_freq /= s;
  } else if (sc.rope_type == "dynamic") {
    // Hugging Face measures this one in max_position_embeddings.
    const auto trained = static_cast<double>(cfg.max_position_embeddings);
    const double n = std::max(static_cast<double>(seq_len > 0 ? seq_len : cfg.max_position_embeddings), trained);
    out.inv_freq = frequencies(cfg.rope_theta * std::pow(s * n / trained - (s - 1), static_cast<double>(d) / (d - 2)));
  } else if (sc.rope_type == "yarn") {
    // Pair index where the wavelength fits `rotations` times into L.
    auto index_of = [&](double rotations) {
      return d * std::log(L / (rotations * 2 * std::numbers::pi)) / (2 * std::log(cfg.rope_theta));
    };
    const double low = std::max(0.0, std::floor(index_of(sc.beta_fast)));
    double high = std::min(static_cast<double>(d - 1), std::ceil(index_of(sc.beta_slow)));
    if (high == low) high += 0.001;
    for (std::size_t i = 0; i < out.inv_freq.size(); ++i) {
      const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
      out.inv_freq(i) = out.inv_freq(i) * (1 - ramp) + out.inv_freq(i) / s * ramp;
    }
    auto mscale = [s](double m) { return s <= 1 ? 1.0 : 0.1 * m * std::log(s) + 1; };
    if (sc.attention_factor) {
      out.attention_factor = *sc.attention_factor;
    } else if (sc.mscale && sc.mscale_all_dim && *sc.mscale != 0 && *sc.mscale_all_dim != 0) {
      out.attention_factor = mscale(*sc.mscale) / mscale(*sc.mscale_all_dim);
    } else {
      out.attention_factor = mscale(1.0);
    }
  }
  return out;
  // END EXERCISE
}

Tensor3 alibi_bias(int num_heads, long long seq_q, long long seq_k, AlibiMode mode) {
  // BEGIN EXERCISE 02.2 "ALiBi slopes and bias" "ALiBi"
  ref::validate_alibi("alibi_bias", num_heads, seq_q, seq_k, mode);
  // Slopes: 2^(-8(h+1)/p) for the largest power of two p <= n, then every other slope of the
  // 2p-head series for the remaining n - p heads.
  auto series = [](int n) {
    std::vector<double> m;
    for (int h = 0; h < n; ++h) m.push_back(std::exp2(-8.0 * (h + 1) / n));
    return m;
  };
  int p = 1;
  while (p <= num_heads / 2) p *= 2;
  std::vector<double> slopes = series(p);
  const std::vector<double> doubled = series(2 * p);
  for (int k = 0; p + k < num_heads; ++k) slopes.push_back(doubled[static_cast<std::size_t>(2 * k)]);

  const auto heads = static_cast<std::size_t>(num_heads), nq = static_cast<std::size_t>(seq_q),
             nk = static_cast<std::size_t>(seq_k);
  Tensor3 bias = Tensor3::from_shape({heads, nq, nk});
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < nq; ++i)
      for (std::size_t j = 0; j < nk; ++j) {
        // i' = i + seq_k - seq_q, signed; B = -m_h |i' - j|, or -inf after i' when causal.
        const double distance = static_cast<double>(i) + static_cast<double>(nk) - static_cast<double>(nq) -
                                static_cast<double>(j);
        bias(h, i, j) = mode == AlibiMode::causal && distance < 0
                            ? -std::numeric_limits<float>::infinity()
                            : static_cast<float>(0.0 - slopes[h] * std::fabs(distance));
      }
  return bias;
  // END EXERCISE
}

}  // namespace tvlab::student
