#include "tvlab/analysis/qat.hpp"

#include <cmath>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::analysis {
namespace {

constexpr std::size_t kOut = 8, kIn = 32, kSamples = 1024, kSteps = 2000;

double largest_code(int bits) { return std::ldexp(1.0, bits - 1) - 1.0; }

void require_bits(const char* fn, int bits) {
  require(bits >= 2 && bits <= 8, fn, "bits (", bits, ") must be between 2 and 8");
}

// Column-major samples: x[s * kIn + i], y[s * kOut + o].
struct Data {
  std::vector<double> x, y;
};

Data make_data(const std::vector<double>& w_true, const std::vector<double>& a, Rng& rng) {
  Data d{std::vector<double>(kSamples * kIn), std::vector<double>(kSamples * kOut)};
  std::vector<double> z(kIn);
  for (std::size_t s = 0; s < kSamples; ++s) {
    for (double& v : z) v = rng.normal();
    for (std::size_t i = 0; i < kIn; ++i) {  // x = A z: correlated inputs
      double v = 0.0;
      for (std::size_t k = 0; k < kIn; ++k) v += a[i * kIn + k] * z[k];
      d.x[s * kIn + i] = v;
    }
    for (std::size_t o = 0; o < kOut; ++o) {  // y = W* x + noise
      double v = 0.0;
      for (std::size_t i = 0; i < kIn; ++i) v += w_true[o * kIn + i] * d.x[s * kIn + i];
      d.y[s * kOut + o] = v + 0.01 * rng.normal();
    }
  }
  return d;
}

// (1/N) sum_s |W x_s - y_s|^2 / ((1/N) sum_s |y_s|^2)
double relative_error(const std::vector<double>& w, const Data& d) {
  double err = 0.0, ref = 0.0;
  for (std::size_t s = 0; s < kSamples; ++s)
    for (std::size_t o = 0; o < kOut; ++o) {
      double p = 0.0;
      for (std::size_t i = 0; i < kIn; ++i) p += w[o * kIn + i] * d.x[s * kIn + i];
      err += (p - d.y[s * kOut + o]) * (p - d.y[s * kOut + o]);
      ref += d.y[s * kOut + o] * d.y[s * kOut + o];
    }
  return err / ref;
}

// The gradient of the mean squared error at the weights `used`: (2/N) (used X - Y) X^T.
std::vector<double> gradient(const std::vector<double>& used, const Data& d) {
  std::vector<double> g(kOut * kIn, 0.0), residual(kOut);
  for (std::size_t s = 0; s < kSamples; ++s) {
    for (std::size_t o = 0; o < kOut; ++o) {
      double p = 0.0;
      for (std::size_t i = 0; i < kIn; ++i) p += used[o * kIn + i] * d.x[s * kIn + i];
      residual[o] = p - d.y[s * kOut + o];
    }
    for (std::size_t o = 0; o < kOut; ++o)
      for (std::size_t i = 0; i < kIn; ++i) g[o * kIn + i] += 2.0 / kSamples * residual[o] * d.x[s * kIn + i];
  }
  return g;
}

// The largest eigenvalue of (2/N) X X^T by power iteration: the curvature that bounds the step.
double curvature(const Data& d) {
  std::vector<double> v(kIn, 1.0), w(kIn);
  double lambda = 0.0;
  for (int it = 0; it < 200; ++it) {
    std::fill(w.begin(), w.end(), 0.0);
    for (std::size_t s = 0; s < kSamples; ++s) {
      double dot = 0.0;
      for (std::size_t i = 0; i < kIn; ++i) dot += d.x[s * kIn + i] * v[i];
      for (std::size_t i = 0; i < kIn; ++i) w[i] += 2.0 / kSamples * dot * d.x[s * kIn + i];
    }
    double norm = 0.0;
    for (double x : w) norm += x * x;
    lambda = std::sqrt(norm);
    for (std::size_t i = 0; i < kIn; ++i) v[i] = w[i] / lambda;
  }
  return lambda;
}

}  // namespace

double fake_quantize(double w, double scale, int bits) {
  require_bits("fake_quantize", bits);
  require(scale > 0.0 && std::isfinite(scale), "fake_quantize", "scale (", scale, ") must be positive");
  const double q = largest_code(bits);
  return scale * std::clamp(std::nearbyint(w / scale), -q, q);  // nearbyint: ties to even
}

double straight_through_gradient(double w, double scale, int bits) {
  require_bits("straight_through_gradient", bits);
  return std::fabs(w / scale) <= largest_code(bits) ? 1.0 : 0.0;
}

QatResult qat_experiment(int bits, std::uint64_t seed) {
  require_bits("qat_experiment", bits);
  Rng rng(seed);
  std::vector<double> w_true(kOut * kIn), a(kIn * kIn);
  for (double& v : w_true) v = rng.normal();
  for (double& v : a) v = rng.normal() / std::sqrt(double(kIn));
  const Data train = make_data(w_true, a, rng), test = make_data(w_true, a, rng);
  const double step = 1.0 / curvature(train);

  // the float layer: W <- W - step * grad L(W)
  std::vector<double> w(kOut * kIn, 0.0);
  for (std::size_t t = 0; t < kSteps; ++t) {
    const std::vector<double> g = gradient(w, train);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] -= step * g[i];
  }
  // PTQ: every weight to its nearest grid point, s = max|W| / Q
  double max_abs = 0.0;
  for (double v : w) max_abs = std::max(max_abs, std::fabs(v));
  const double scale = max_abs / largest_code(bits);
  auto quantized = [&](const std::vector<double>& latent) {
    std::vector<double> out(latent.size());
    for (std::size_t i = 0; i < latent.size(); ++i) out[i] = fake_quantize(latent[i], scale, bits);
    return out;
  };
  QatResult r;
  r.float_error = relative_error(w, test);
  r.ptq_error = relative_error(quantized(w), test);
  // QAT: the forward pass through W^ = fake_quantize(W), the gradient passed straight through, with
  // a tenth of the float step (a weight near a rounding boundary would otherwise jump back and forth
  // across it); the quantized weights of lowest training error are kept (PTQ's among them)
  std::vector<double> latent = w, best = quantized(w);
  double best_train = relative_error(best, train);
  for (std::size_t t = 0; t < kSteps; ++t) {
    const std::vector<double> current = quantized(latent);
    const double train_error = relative_error(current, train);
    if (train_error < best_train) best_train = train_error, best = current;
    const std::vector<double> g = gradient(current, train);
    for (std::size_t i = 0; i < latent.size(); ++i)
      latent[i] -= 0.1 * step * g[i] * straight_through_gradient(latent[i], scale, bits);
  }
  r.qat_error = relative_error(best, test);
  return r;
}

}  // namespace tvlab::analysis
