#include "tvlab/analysis/sinusoidal_extrapolation.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "tvlab/core/error.hpp"

namespace tvlab::analysis {
namespace {

void check_encoding(const char* fn, int d_model, double base) {
  require(d_model > 0 && d_model % 2 == 0, fn, "d_model (", d_model, ") must be positive and even");
  require(std::isfinite(base) && base > 1, fn, "base (", base, ") must be finite and > 1");
}

// omega_i = base^(-2i/d), i = 0 .. d/2 - 1.
std::vector<double> frequencies(int d_model, double base) {
  std::vector<double> omega(static_cast<std::size_t>(d_model / 2));
  for (std::size_t i = 0; i < omega.size(); ++i) omega[i] = std::pow(base, -2.0 * static_cast<double>(i) / d_model);
  return omega;
}

// sim(Delta) = (2/d) sum_i cos(Delta omega_i).
double similarity(const std::vector<double>& omega, long long distance) {
  double sum = 0.0;
  for (double w : omega) sum += std::cos(static_cast<double>(distance) * w);
  return sum / static_cast<double>(omega.size());
}

}  // namespace

double sinusoidal_similarity(int d_model, double base, long long distance) {
  check_encoding("sinusoidal_similarity", d_model, base);
  return similarity(frequencies(d_model, base), distance);
}

std::vector<NearestTrainedEncoding> sinusoidal_nearest_trained(int d_model, double base, long long L,
                                                               const std::vector<long long>& edges) {
  const char* fn = "sinusoidal_nearest_trained";
  check_encoding(fn, d_model, base);
  require(L > 0, fn, "original_length (", L, ") must be positive");
  require(edges.size() >= 2, fn, "edges must hold at least two positions (got ", edges.size(), ")");
  require(edges.front() >= L, fn, "edges: the first (", edges.front(), ") must be >= original_length (", L, ")");
  for (std::size_t e = 1; e < edges.size(); ++e)
    require(edges[e] > edges[e - 1], fn, "edges must increase (", edges[e - 1], " then ", edges[e], ")");
  const std::vector<double> omega = frequencies(d_model, base);
  std::vector<NearestTrainedEncoding> rows;
  for (std::size_t e = 0; e + 1 < edges.size(); ++e) {
    const long long first = edges[e], last = edges[e + 1];
    // p in [first, last) and p' in [0, L) give the distances Delta = p - p' in [first - L + 1, last - 1].
    NearestTrainedEncoding best{first, last, 0, 0, -2.0, 0.0};
    for (long long delta = first - L + 1; delta <= last - 1; ++delta) {
      const double sim = similarity(omega, delta);
      if (sim > best.similarity) {
        best.similarity = sim;
        best.position = std::max(first, delta);  // the first p in the range with p - delta in [0, L)
        best.nearest = best.position - delta;
      }
    }
    best.distance = std::sqrt(std::max(0.0, d_model * (1.0 - best.similarity)));
    rows.push_back(best);
  }
  return rows;
}

int sinusoidal_unseen_pairs(int d_model, double base, long long L) {
  check_encoding("sinusoidal_unseen_pairs", d_model, base);
  require(L > 0, "sinusoidal_unseen_pairs", "original_length (", L, ") must be positive");
  int count = 0;
  for (double w : frequencies(d_model, base)) count += static_cast<double>(L - 1) * w < 2 * std::numbers::pi ? 1 : 0;
  return count;
}

}  // namespace tvlab::analysis
