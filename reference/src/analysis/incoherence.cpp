#include "tvlab/analysis/incoherence.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::analysis {
namespace {

bool power_of_two(std::size_t n) { return n > 0 && (n & (n - 1)) == 0; }

// x <- H x for a vector of n = 2^k entries with stride `stride`, H the normalised Walsh-Hadamard
// matrix: log2(n) rounds of butterflies (a, b) -> (a + b, a - b), then 1/sqrt(n).
void walsh_hadamard(double* x, std::size_t n, std::size_t stride) {
  for (std::size_t half = 1; half < n; half *= 2)
    for (std::size_t i = 0; i < n; i += 2 * half)
      for (std::size_t j = i; j < i + half; ++j) {
        const double a = x[j * stride], b = x[(j + half) * stride];
        x[j * stride] = a + b;
        x[(j + half) * stride] = a - b;
      }
  const double norm = 1.0 / std::sqrt(static_cast<double>(n));
  for (std::size_t i = 0; i < n; ++i) x[i * stride] *= norm;
}

std::vector<double> random_signs(Rng& rng, std::size_t n) {
  std::vector<double> d(n);
  for (double& s : d) s = rng.uniform() < 0.5 ? -1.0 : 1.0;
  return d;
}

}  // namespace

DTensor2 incoherent_rotation(const DTensor2& w, std::uint64_t seed, bool inverse) {
  const char* fn = "incoherent_rotation";
  require(w.dimension() == 2 && w.size() > 0, fn, "w must be a non-empty matrix");
  const std::size_t m = w.shape()[0], n = w.shape()[1];
  require(power_of_two(m) && power_of_two(n), fn, "w is ", m, " x ", n, ": both sizes must be powers of two");
  for (double v : w) require(std::isfinite(v), fn, "w has a value that is not finite");
  Rng rng(seed);
  const std::vector<double> dm = random_signs(rng, m), dn = random_signs(rng, n);
  DTensor2 out = w;
  if (!inverse) {
    // U W V^T = H_m D_m W D_n H_n (H symmetric): signs, then the transforms of the columns and rows
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) out(i, j) *= dm[i] * dn[j];
    for (std::size_t j = 0; j < n; ++j) walsh_hadamard(&out(0, j), m, n);
    for (std::size_t i = 0; i < m; ++i) walsh_hadamard(&out(i, 0), n, 1);
  } else {
    // U^T W V = D_m H_m W H_n D_n: the transforms, then the signs
    for (std::size_t j = 0; j < n; ++j) walsh_hadamard(&out(0, j), m, n);
    for (std::size_t i = 0; i < m; ++i) walsh_hadamard(&out(i, 0), n, 1);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) out(i, j) *= dm[i] * dn[j];
  }
  return out;
}

double coherence(const DTensor2& w) {
  require(w.size() > 0, "coherence", "w must not be empty");
  double max_abs = 0.0, sum_sq = 0.0;
  for (double v : w) max_abs = std::max(max_abs, std::fabs(v)), sum_sq += v * v;
  return sum_sq == 0.0 ? 0.0 : max_abs / std::sqrt(sum_sq / static_cast<double>(w.size()));
}

DTensor2 round_rows(const DTensor2& w, int bits) {
  require(bits >= 2 && bits <= 8, "round_rows", "bits (", bits, ") must be between 2 and 8");
  const double top = std::ldexp(1.0, bits - 1) - 1.0;
  DTensor2 out = w;
  for (std::size_t i = 0; i < w.shape()[0]; ++i) {
    double max_abs = 0.0;
    for (std::size_t j = 0; j < w.shape()[1]; ++j) max_abs = std::max(max_abs, std::fabs(w(i, j)));
    const double s = max_abs / top;
    for (std::size_t j = 0; j < w.shape()[1]; ++j)
      out(i, j) = s == 0.0 ? 0.0 : s * std::clamp(std::nearbyint(w(i, j) / s), -top, top);
  }
  return out;
}

double weight_output_error(const DTensor2& w, const DTensor2& w_hat, const DTensor2& x) {
  const char* fn = "weight_output_error";
  require(w_hat.shape() == w.shape(), fn, "w_hat is ", w_hat.shape()[0], " x ", w_hat.shape()[1], ", w ", w.shape()[0], " x ",
          w.shape()[1]);
  require(x.shape()[0] == w.shape()[1], fn, "x has ", x.shape()[0], " rows, expected w's row length (", w.shape()[1], ")");
  // ||(W - W_hat) X||_F / ||W X||_F, column by column of X
  double err = 0.0, ref = 0.0;
  for (std::size_t r = 0; r < w.shape()[0]; ++r)
    for (std::size_t c = 0; c < x.shape()[1]; ++c) {
      double y = 0.0, dy = 0.0;
      for (std::size_t j = 0; j < w.shape()[1]; ++j) {
        y += w(r, j) * x(j, c);
        dy += (w(r, j) - w_hat(r, j)) * x(j, c);
      }
      err += dy * dy, ref += y * y;
    }
  require(ref > 0.0, fn, "W X is all zero: no relative error");
  return std::sqrt(err / ref);
}

std::vector<IncoherenceRow> incoherence_table(const DTensor2& w, const std::vector<int>& bits, std::uint64_t seed,
                                              const DTensor2& x) {
  const DTensor2 rotated = incoherent_rotation(w, seed, false);
  double norm_sq = 0.0;
  for (double v : w) norm_sq += v * v;
  auto relative = [&](const DTensor2& approx) {
    double err = 0.0;
    for (std::size_t i = 0; i < w.size(); ++i) err += std::pow(w.data()[i] - approx.data()[i], 2);
    return std::sqrt(err / norm_sq);
  };
  std::vector<IncoherenceRow> rows;
  for (int b : bits) {
    const DTensor2 direct = round_rows(w, b), via_rotation = incoherent_rotation(round_rows(rotated, b), seed, true);
    rows.push_back({b, relative(direct), relative(via_rotation), weight_output_error(w, direct, x),
                    weight_output_error(w, via_rotation, x)});
  }
  return rows;
}

}  // namespace tvlab::analysis
