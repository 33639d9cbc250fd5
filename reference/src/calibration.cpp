#include "tvlab/ref/calibration.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tvlab/core/error.hpp"

namespace tvlab::ref {
namespace {

void require_data(const char* function, std::span<const float> data) {
  require(!data.empty(), function, "data must not be empty");
  for (std::size_t i = 0; i < data.size(); ++i)
    require(std::isfinite(data[i]), function, "data has a non-finite value (", data[i], ") at index ", i);
}

void require_p(const char* function, double p) {
  require(p > 0.0 && p <= 100.0, function, "p (", p, ") must be in (0, 100]");
}

// h = (n - 1) p / 100: the rank below (floor h) and the weight of the rank above.
void rank_of(std::size_t n, double p, std::size_t& below, double& frac) {
  const double h = static_cast<double>(n - 1) * p / 100.0;
  below = std::min(static_cast<std::size_t>(std::floor(h)), n - 1);
  frac = h - static_cast<double>(below);
}

// P_p = v_floor(h) + (h - floor(h)) (v_floor(h)+1 - v_floor(h)) over sorted values, p in [0, 100]
double exact_percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  std::size_t below = 0;
  double frac = 0.0;
  rank_of(v.size(), p, below, frac);
  if (frac == 0.0 || below + 1 >= v.size()) return v[below];
  return v[below] + frac * (v[below + 1] - v[below]);
}

// The same with each order statistic replaced by the centre of its histogram bin, p in [0, 100].
double binned_percentile(const std::vector<double>& v, double p, std::size_t bins) {
  const auto [lo_it, hi_it] = std::minmax_element(v.begin(), v.end());
  const double lo = *lo_it, hi = *hi_it, w = (hi - lo) / static_cast<double>(bins);
  if (w == 0.0) return lo;  // all values equal
  std::vector<std::size_t> count(bins, 0);
  for (double x : v) ++count[std::min(bins - 1, static_cast<std::size_t>((x - lo) / w))];
  // the centre of the bin that holds the value of 0-based rank r
  const auto value_of_rank = [&](std::size_t r) {
    std::size_t seen = 0;
    for (std::size_t i = 0; i < bins; ++i) {
      seen += count[i];
      if (seen > r) return lo + (static_cast<double>(i) + 0.5) * w;
    }
    return hi;
  };
  std::size_t below = 0;
  double frac = 0.0;
  rank_of(v.size(), p, below, frac);
  const double a = value_of_rank(below);
  if (frac == 0.0 || below + 1 >= v.size()) return a;
  return a + frac * (value_of_rank(below + 1) - a);
}

std::vector<double> values(std::span<const float> data, bool absolute) {
  std::vector<double> v(data.size());
  for (std::size_t i = 0; i < data.size(); ++i) v[i] = absolute ? std::fabs(data[i]) : data[i];
  return v;
}

}  // namespace

double percentile(std::span<const float> data, double p) {
  require_data("percentile", data);
  require_p("percentile", p);
  return exact_percentile(values(data, false), p);
}

double histogram_percentile(std::span<const float> data, double p, std::size_t bins) {
  require_data("histogram_percentile", data);
  require_p("histogram_percentile", p);
  require_positive("histogram_percentile", "bins", bins);
  return binned_percentile(values(data, false), p, bins);
}

ClipRange calibrate_min_max(std::span<const float> data, bool symmetric) {
  require_data("calibrate_min_max", data);
  return min_max_range(data.data(), data.size(), symmetric);
}

ClipRange calibrate_percentile(std::span<const float> data, double p, bool symmetric, std::size_t bins) {
  const char* fn = "calibrate_percentile";
  require_data(fn, data);
  require_p(fn, p);
  const auto pick = [&](const std::vector<double>& v, double q) {
    return bins == 0 ? exact_percentile(v, q) : binned_percentile(v, q, bins);
  };
  if (symmetric) {
    const double c = pick(values(data, true), p);  // c = P_p(|x|)
    return {-c, c};
  }
  const std::vector<double> v = values(data, false);
  return {std::min(pick(v, 100.0 - p), 0.0), std::max(pick(v, p), 0.0)};
}

double quantization_mse(std::span<const float> data, ClipRange range, int bits, bool symmetric) {
  require_data("quantization_mse", data);
  const AffineParams prm = affine_params(range, bits, symmetric);
  // L = (1/n) sum_i (x_i - s (q_i - z))^2
  double sum = 0.0;
  for (float x : data) {
    const int q = affine_code(x, prm, bits, symmetric, Rounding::nearest_even);
    const double e = x - static_cast<double>(prm.scale) * (q - prm.zero_point);
    sum += e * e;
  }
  return sum / static_cast<double>(data.size());
}

ClipRange calibrate_mse(std::span<const float> data, int bits, bool symmetric, std::size_t K) {
  const char* fn = "calibrate_mse";
  require_data(fn, data);
  require(bits >= 2 && bits <= 8, fn, "bits (", bits, ") must be between 2 and 8");
  require_positive(fn, "K", K);
  const ClipRange full = min_max_range(data.data(), data.size(), symmetric);
  ClipRange best = full;
  double best_loss = INFINITY;
  // candidates c_k = max|x| k / K (asymmetric: [lo k / K, hi k / K]), k = 1..K; k = K is min-max
  for (std::size_t k = 1; k <= K; ++k) {
    const double f = static_cast<double>(k) / static_cast<double>(K);
    const ClipRange candidate{full.lo * f, full.hi * f};
    const double loss = quantization_mse(data, candidate, bits, symmetric);
    if (loss < best_loss) best_loss = loss, best = candidate;
  }
  return best;
}

}  // namespace tvlab::ref
