#include "tvlab/analysis/attention_entropy.hpp"

#include <algorithm>
#include <cmath>

#include "tvlab/analysis/rope_extrapolation.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::analysis {
namespace {

// Scores of the query at position n - 1 against keys j = 0 .. n-1, pairs (i, i + d/2):
// (R_{n-1} q) . (R_j k_j) = q . R_{j-(n-1)} k_j = sum_i (q_a k_a + q_b k_b) cos(phi) + (q_b k_a - q_a k_b) sin(phi),
// phi = (j - (n - 1)) theta_i, divided by sqrt(d) and multiplied by logit_factor.
std::vector<double> last_row_scores(const std::vector<double>& q, const std::vector<std::vector<double>>& keys,
                                    const std::vector<double>& inv_freq, long long n, double logit_factor) {
  const std::size_t pairs = inv_freq.size();
  const double scale = logit_factor / std::sqrt(static_cast<double>(2 * pairs));
  std::vector<double> scores(static_cast<std::size_t>(n));
  for (long long j = 0; j < n; ++j) {
    const std::vector<double>& k = keys[static_cast<std::size_t>(j)];
    const double offset = static_cast<double>(j - (n - 1));
    double s = 0.0;
    for (std::size_t i = 0; i < pairs; ++i) {
      const double phi = offset * inv_freq[i];
      const double qa = q[i], qb = q[i + pairs], ka = k[i], kb = k[i + pairs];
      s += (qa * ka + qb * kb) * std::cos(phi) + (qb * ka - qa * kb) * std::sin(phi);
    }
    scores[static_cast<std::size_t>(j)] = scale * s;
  }
  return scores;
}

}  // namespace

double softmax_entropy(const std::vector<double>& x) {
  require(!x.empty(), "softmax_entropy", "x must not be empty");
  for (double v : x) require(std::isfinite(v), "softmax_entropy", "x holds a non-finite value (", v, ")");
  const double m = *std::max_element(x.begin(), x.end());
  double z = 0.0;
  for (double v : x) z += std::exp(v - m);
  // H = -sum_j p_j ln p_j with ln p_j = x_j - M - ln Z, so H = ln Z + M - sum_j p_j x_j.
  double mean_x = 0.0;
  for (double v : x) mean_x += std::exp(v - m) / z * v;
  return std::log(z) + m - mean_x;
}

std::vector<AttentionEntropyRow> attention_entropy(int head_dim, double base, long long L, double s,
                                                   const std::vector<long long>& lengths, int samples,
                                                   std::uint64_t seed) {
  const char* fn = "attention_entropy";
  require(head_dim > 2 && head_dim % 2 == 0, fn, "head_dim (", head_dim, ") must be even and > 2");
  require(L > 0, fn, "original_length (", L, ") must be positive");
  require(std::isfinite(s) && s >= 1.0, fn, "factor (", s, ") must be finite and >= 1");
  require_positive(fn, "samples", samples);
  require(!lengths.empty(), fn, "lengths must not be empty");
  for (long long n : lengths) require(n > 0, fn, "lengths: every length must be positive (got ", n, ")");
  const long long longest = *std::max_element(lengths.begin(), lengths.end());

  // extension_methods: [0] the original frequencies, [4] YaRN.
  const auto methods = extension_methods(head_dim, base, L, s);
  const RopeFrequencies& original = methods.front().freqs;
  const RopeFrequencies& yarn = methods.back().freqs;
  const std::vector<double> theta(original.inv_freq.begin(), original.inv_freq.end());
  const std::vector<double> theta_yarn(yarn.inv_freq.begin(), yarn.inv_freq.end());
  const double a_f = yarn.attention_factor;

  std::vector<AttentionEntropyRow> rows;
  for (long long n : lengths)
    rows.push_back({n, std::log(static_cast<double>(n)), 0.0, 0.0, 0.0, a_f});
  Rng rng(seed);
  const auto d = static_cast<std::size_t>(head_dim);
  for (int sample = 0; sample < samples; ++sample) {
    std::vector<double> q(d);
    for (auto& x : q) x = rng.normal();
    std::vector<std::vector<double>> keys(static_cast<std::size_t>(longest), std::vector<double>(d));
    for (auto& k : keys)
      for (auto& x : k) x = rng.normal();
    for (auto& row : rows) {
      row.original += softmax_entropy(last_row_scores(q, keys, theta, row.length, 1.0)) / samples;
      row.yarn += softmax_entropy(last_row_scores(q, keys, theta_yarn, row.length, 1.0)) / samples;
      // a_f multiplies cos and sin of both q and k: the logit grows by a_f^2.
      row.yarn_with_factor += softmax_entropy(last_row_scores(q, keys, theta_yarn, row.length, a_f * a_f)) / samples;
    }
  }
  return rows;
}

}  // namespace tvlab::analysis
