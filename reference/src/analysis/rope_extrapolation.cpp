#include "tvlab/analysis/rope_extrapolation.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/alibi.hpp"
#include "tvlab/ref/rope.hpp"

namespace tvlab::analysis {
namespace {

RopeConfig base_config(int head_dim, double base, long long original_length) {
  RopeConfig cfg;
  cfg.head_dim = head_dim;
  cfg.rope_theta = base;
  cfg.max_position_embeddings = original_length;
  return cfg;
}

// cos and sin of Delta theta_i for Delta in [0, count), one row per distance: computed once per
// method and shared by every sample.
struct AngleTable {
  std::size_t pairs = 0;
  std::vector<double> cos, sin;
};

AngleTable angle_table(const DTensor1& inv_freq, long long count) {
  AngleTable t{inv_freq.size(), {}, {}};
  t.cos.resize(static_cast<std::size_t>(count) * t.pairs);
  t.sin.resize(t.cos.size());
  for (long long delta = 0; delta < count; ++delta)
    for (std::size_t i = 0; i < t.pairs; ++i) {
      const double angle = static_cast<double>(delta) * inv_freq(i);
      t.cos[static_cast<std::size_t>(delta) * t.pairs + i] = std::cos(angle);
      t.sin[static_cast<std::size_t>(delta) * t.pairs + i] = std::sin(angle);
    }
  return t;
}

// Scores s(Delta) = q . R_Delta k / sqrt(d) for Delta in [first, last), with pairs (i, i + d/2):
// sum_i (q_a k_a + q_b k_b) cos(Delta theta_i) + (q_b k_a - q_a k_b) sin(Delta theta_i).
std::vector<double> scores(const std::vector<double>& q, const std::vector<double>& k, const AngleTable& t,
                           long long first, long long last) {
  const std::size_t pairs = t.pairs;
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(last - first));
  for (long long delta = first; delta < last; ++delta) {
    const double* c = t.cos.data() + static_cast<std::size_t>(delta) * pairs;
    const double* sn = t.sin.data() + static_cast<std::size_t>(delta) * pairs;
    double s = 0.0;
    for (std::size_t i = 0; i < pairs; ++i) {
      const double qa = q[i], qb = q[i + pairs], ka = k[i], kb = k[i + pairs];
      s += (qa * ka + qb * kb) * c[i] + (qb * ka - qa * kb) * sn[i];
    }
    out.push_back(s / std::sqrt(static_cast<double>(2 * pairs)));
  }
  return out;
}

void check_experiment(const char* fn, int head_dim, long long L, double s, int samples) {
  require(head_dim > 2 && head_dim % 2 == 0, fn, "head_dim (", head_dim, ") must be even and > 2");
  require(L >= 64, fn, "original_length (", L, ") must be >= 64 (the short range is 64 positions)");
  require(std::isfinite(s) && s >= 1.0, fn, "factor (", s, ") must be finite and >= 1");
  require_positive(fn, "samples", samples);
}

// The random (q, k) samples, N(0, 1) entries: the same for every method and for ALiBi.
struct Samples {
  std::vector<std::vector<double>> q, k;
};

Samples draw_samples(std::size_t d, int samples, std::uint64_t seed) {
  Rng rng(seed);
  Samples out;
  for (int n = 0; n < samples; ++n) {
    std::vector<double> q(d), k(d);
    for (auto& x : q) x = rng.normal();
    for (auto& x : k) x = rng.normal();
    out.q.push_back(q);
    out.k.push_back(k);
  }
  return out;
}

// sum_{t >= first} e^{x_t} / sum_t e^{x_t}, with the maximum subtracted first.
double softmax_mass_from(const std::vector<double>& x, std::size_t first) {
  const double m = *std::max_element(x.begin(), x.end());
  double all = 0.0, tail = 0.0;
  for (std::size_t t = 0; t < x.size(); ++t) {
    const double w = std::exp(x[t] - m);
    all += w;
    if (t >= first) tail += w;
  }
  return tail / all;
}

}  // namespace

std::vector<ExtensionMethod> extension_methods(int head_dim, double base, long long original_length, double factor) {
  RopeConfig cfg = base_config(head_dim, base, original_length);
  std::vector<ExtensionMethod> methods;
  methods.push_back({"default (none)", ref::rope_frequencies(cfg)});
  cfg.rope_scaling.factor = factor;
  cfg.rope_scaling.rope_type = "linear";
  methods.push_back({"PI (linear)", ref::rope_frequencies(cfg)});
  RopeConfig ntk = base_config(head_dim, ref::ntk_aware_base(base, factor, head_dim), original_length);
  methods.push_back({"NTK-aware (static, alpha = s)", ref::rope_frequencies(ntk)});
  cfg.rope_scaling.rope_type = "dynamic";
  methods.push_back({"dynamic NTK at length sL",
                     ref::rope_frequencies(cfg, static_cast<long long>(std::llround(factor * static_cast<double>(original_length))))});
  cfg.rope_scaling.rope_type = "yarn";
  methods.push_back({"YaRN", ref::rope_frequencies(cfg)});
  return methods;
}

std::vector<ExtrapolationRow> rope_extrapolation(int head_dim, double base, long long L, double s, int samples,
                                                 std::uint64_t seed) {
  check_experiment("rope_extrapolation", head_dim, L, s, samples);
  const auto methods = extension_methods(head_dim, base, L, s);
  const DTensor1& original = methods.front().freqs.inv_freq;
  const AngleTable original_table = angle_table(original, L);
  const auto extended = static_cast<long long>(std::llround(s * static_cast<double>(L)));
  const Samples drawn = draw_samples(static_cast<std::size_t>(head_dim), samples, seed);
  const auto& qs = drawn.q;
  const auto& ks = drawn.k;
  std::vector<ExtrapolationRow> rows;
  for (const auto& method : methods) {
    const DTensor1& theta = method.freqs.inv_freq;
    const AngleTable table = angle_table(theta, extended);
    ExtrapolationRow row;
    row.method = method.name;
    // Pairs that never complete a turn in training, whose angle at sL - 1 passes L theta_i.
    for (std::size_t i = 0; i < theta.size(); ++i)
      if (static_cast<double>(L - 1) * original(i) < 2 * std::numbers::pi &&
          static_cast<double>(extended - 1) * theta(i) > static_cast<double>(L) * original(i))
        ++row.unseen_angle_pairs;
    row.neighbour_resolution = theta(0) / original(0);
    long long outside = 0, self_below = 0, beyond_count = 0;
    double change = 0.0, energy = 0.0, weight_beyond = 0.0;
    for (int n = 0; n < samples; ++n) {
      const auto& q = qs[static_cast<std::size_t>(n)];
      const auto& k = ks[static_cast<std::size_t>(n)];
      // What training produced: the original frequencies at distances [0, L).
      const auto trained = scores(q, k, original_table, 0, L);
      const auto trained_self = scores(q, q, original_table, 0, L);
      const auto [lo, hi] = std::minmax_element(trained.begin(), trained.end());
      const double self_min = *std::min_element(trained_self.begin(), trained_self.end());
      // The method at distances [L, sL).
      const auto beyond = scores(q, k, table, L, extended);
      const auto beyond_self = scores(q, q, table, L, extended);
      for (std::size_t t = 0; t < beyond.size(); ++t) {
        outside += (beyond[t] < *lo || beyond[t] > *hi) ? 1 : 0;
        self_below += beyond_self[t] < self_min ? 1 : 0;
      }
      beyond_count += static_cast<long long>(beyond.size());
      // The query at sL - 1 over keys at every distance [0, sL): the weight on distances >= L.
      weight_beyond += softmax_mass_from(scores(q, k, table, 0, extended), static_cast<std::size_t>(L)) / samples;
      // Short range: distances [0, 64), method vs original.
      const auto short_method = scores(q, k, table, 0, 64);
      for (std::size_t t = 0; t < 64; ++t) {
        change += (short_method[t] - trained[t]) * (short_method[t] - trained[t]);
        energy += trained[t] * trained[t];
      }
    }
    row.outside_range = static_cast<double>(outside) / static_cast<double>(std::max(1LL, beyond_count));
    row.self_below_minimum = static_cast<double>(self_below) / static_cast<double>(std::max(1LL, beyond_count));
    row.short_range_change = std::sqrt(change / energy);
    row.weight_beyond_original = weight_beyond;
    rows.push_back(row);
  }
  return rows;
}

ExtrapolationRow alibi_extrapolation(int head_dim, long long L, double s, int num_heads, int samples,
                                     std::uint64_t seed) {
  check_experiment("alibi_extrapolation", head_dim, L, s, samples);
  require_positive("alibi_extrapolation", "num_heads", num_heads);
  const DTensor1 slopes = ref::alibi_slopes(num_heads);
  const auto extended = static_cast<long long>(std::llround(s * static_cast<double>(L)));
  const Samples drawn = draw_samples(static_cast<std::size_t>(head_dim), samples, seed);
  ExtrapolationRow row;
  row.method = "ALiBi (" + std::to_string(num_heads) + " heads)";
  row.neighbour_resolution = std::numeric_limits<double>::quiet_NaN();
  long long outside = 0, self_below = 0, beyond_count = 0;
  for (int n = 0; n < samples; ++n) {
    const auto& q = drawn.q[static_cast<std::size_t>(n)];
    const auto& k = drawn.k[static_cast<std::size_t>(n)];
    const double m = slopes(static_cast<std::size_t>(n % num_heads));
    double qk = 0.0, qq = 0.0;
    for (std::size_t c = 0; c < q.size(); ++c) {
      qk += q[c] * k[c];
      qq += q[c] * q[c];
    }
    const double root_d = std::sqrt(static_cast<double>(head_dim));
    // s(Delta) = q . k / sqrt(d) - m Delta at every distance [0, sL); the trained ones are [0, L).
    std::vector<double> all(static_cast<std::size_t>(extended)), self(all.size());
    for (long long delta = 0; delta < extended; ++delta) {
      all[static_cast<std::size_t>(delta)] = qk / root_d - m * static_cast<double>(delta);
      self[static_cast<std::size_t>(delta)] = qq / root_d - m * static_cast<double>(delta);
    }
    const auto trained_end = all.begin() + L;
    const auto [lo, hi] = std::minmax_element(all.begin(), trained_end);
    const double self_min = *std::min_element(self.begin(), self.begin() + L);
    for (auto t = static_cast<std::size_t>(L); t < all.size(); ++t) {
      outside += (all[t] < *lo || all[t] > *hi) ? 1 : 0;
      self_below += self[t] < self_min ? 1 : 0;
    }
    beyond_count += extended - L;
    row.weight_beyond_original += softmax_mass_from(all, static_cast<std::size_t>(L)) / samples;
  }
  row.outside_range = static_cast<double>(outside) / static_cast<double>(std::max(1LL, beyond_count));
  row.self_below_minimum = static_cast<double>(self_below) / static_cast<double>(std::max(1LL, beyond_count));
  return row;
}

}  // namespace tvlab::analysis
