#include "tvlab/analysis/low_rank.hpp"

#include <algorithm>
#include <cmath>

#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/linear_attention.hpp"

namespace tvlab::analysis {

Svd svd(const DTensor2& a) {
  const char* fn = "svd";
  require(a.dimension() == 2 && a.size() > 0, fn, "a must be a non-empty matrix");
  const std::size_t rows = a.shape()[0], cols = a.shape()[1];
  require(rows >= cols, fn, "a has ", rows, " rows and ", cols, " columns: give it with rows >= columns (transpose it)");
  DTensor2 u = a, v = xt::eye<double>(cols);
  // Sweep over all pairs of columns (p, q): the rotation that makes u_p . u_q = 0 (Hestenes 1958),
  // applied to the same columns of V, until every pair is orthogonal to 1e-15 of the product of
  // their norms. Then A V = U, a matrix of orthogonal columns: A = (U / sigma) diag(sigma) V^T.
  for (int sweep = 0; sweep < 60; ++sweep) {
    double off = 0.0;
    for (std::size_t p = 0; p + 1 < cols; ++p)
      for (std::size_t q = p + 1; q < cols; ++q) {
        double alpha = 0.0, beta = 0.0, gamma = 0.0;  // |u_p|^2, |u_q|^2, u_p . u_q
        for (std::size_t i = 0; i < rows; ++i) {
          alpha += u(i, p) * u(i, p);
          beta += u(i, q) * u(i, q);
          gamma += u(i, p) * u(i, q);
        }
        if (gamma == 0.0 || std::fabs(gamma) <= 1e-15 * std::sqrt(alpha * beta)) continue;
        off = std::max(off, std::fabs(gamma) / std::sqrt(alpha * beta));
        // tan(theta) = t solves t^2 + 2 zeta t - 1 = 0, zeta = (beta - alpha) / (2 gamma): the smaller root
        const double zeta = (beta - alpha) / (2.0 * gamma);
        const double t = std::copysign(1.0, zeta) / (std::fabs(zeta) + std::sqrt(1.0 + zeta * zeta));
        const double c = 1.0 / std::sqrt(1.0 + t * t), s = c * t;
        for (DTensor2* m : {&u, &v})
          for (std::size_t i = 0; i < m->shape()[0]; ++i) {
            const double mp = (*m)(i, p), mq = (*m)(i, q);
            (*m)(i, p) = c * mp - s * mq;
            (*m)(i, q) = s * mp + c * mq;
          }
      }
    if (off <= 1e-15) break;
  }
  // sigma_j = |u_j|, columns in decreasing order of sigma, u_j normalised (left as 0 when sigma_j = 0)
  std::vector<double> norms(cols);
  for (std::size_t j = 0; j < cols; ++j) {
    double norm = 0.0;
    for (std::size_t i = 0; i < rows; ++i) norm += u(i, j) * u(i, j);
    norms[j] = std::sqrt(norm);
  }
  std::vector<std::size_t> order(cols);
  for (std::size_t j = 0; j < cols; ++j) order[j] = j;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return norms[x] > norms[y]; });
  Svd out{DTensor2::from_shape({rows, cols}), std::vector<double>(cols), DTensor2::from_shape({cols, cols})};
  for (std::size_t k = 0; k < cols; ++k) {
    const std::size_t j = order[k];
    out.sigma[k] = norms[j];
    for (std::size_t i = 0; i < rows; ++i) out.u(i, k) = norms[j] > 0.0 ? u(i, j) / norms[j] : 0.0;
    for (std::size_t i = 0; i < cols; ++i) out.v(i, k) = v(i, j);
  }
  return out;
}

std::vector<double> singular_values(const DTensor2& a) {
  require(a.dimension() == 2 && a.size() > 0, "singular_values", "a must be a non-empty matrix");
  require(a.shape()[0] >= a.shape()[1], "singular_values", "a has ", a.shape()[0], " rows and ", a.shape()[1],
          " columns: give it with rows >= columns (transpose it)");
  return svd(a).sigma;
}

std::size_t numerical_rank(const std::vector<double>& sigma, double relative_tolerance) {
  if (sigma.empty() || sigma.front() == 0.0) return 0;
  return static_cast<std::size_t>(std::count_if(sigma.begin(), sigma.end(),
                                                [&](double s) { return s > relative_tolerance * sigma.front(); }));
}

namespace {

AttentionMatrixSpectrum spectrum_of(const DTensor2& p) {
  AttentionMatrixSpectrum out;
  out.singular_values = singular_values(p);
  out.rank = numerical_rank(out.singular_values);
  // -(1/n) sum_i sum_j P_ij ln P_ij
  const std::size_t n = p.shape()[0];
  double entropy = 0.0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < p.shape()[1]; ++j)
      if (p(i, j) > 0.0) entropy -= p(i, j) * std::log(p(i, j));
  out.mean_row_entropy = entropy / static_cast<double>(n);
  return out;
}

}  // namespace

LowRankReport low_rank_dilemma(std::size_t n, std::size_t d, FeatureMap map, std::uint64_t seed) {
  const char* fn = "low_rank_dilemma";
  require(n >= 1, fn, "n (", n, ") must be at least 1");
  require(d >= 1, fn, "d (", d, ") must be at least 1");
  Rng rng(seed);
  const Tensor3 q = rng.normal_tensor(1, n, d), k = rng.normal_tensor(1, n, d);
  // P_ij = e^{s_ij - max_l s_il} / sum_l e^{s_il - max_l s_il}, s = q . k / sqrt(d)
  DTensor2 softmax = xt::zeros<double>({n, n});
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<double> s(n);
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t c = 0; c < d; ++c) s[j] += static_cast<double>(q(0, i, c)) * k(0, j, c);
      s[j] /= std::sqrt(static_cast<double>(d));
    }
    const double m = *std::max_element(s.begin(), s.end());
    double sum = 0.0;
    for (std::size_t j = 0; j < n; ++j) sum += softmax(i, j) = std::exp(s[j] - m);
    for (std::size_t j = 0; j < n; ++j) softmax(i, j) /= sum;
  }
  // A_ij = phi(q_i) . phi(k_j) / sum_l phi(q_i) . phi(k_l), with the chapter's feature map and the
  // products in double (a float matrix would carry rounding noise of full rank at 1e-8).
  const Tensor3 phi_q = ref::feature_map(q, map), phi_k = ref::feature_map(k, map);
  DTensor2 linear = xt::zeros<double>({n, n});
  for (std::size_t i = 0; i < n; ++i) {
    double sum = 0.0;
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t c = 0; c < d; ++c) linear(i, j) += static_cast<double>(phi_q(0, i, c)) * phi_k(0, j, c);
      sum += linear(i, j);
    }
    require(sum > 0.0, fn, "the normaliser of query ", i, " is ", sum, ": map (", to_string(map),
            ") gives it no positive weight; use elu_plus_one");
    for (std::size_t j = 0; j < n; ++j) linear(i, j) /= sum;
  }
  return {spectrum_of(softmax), spectrum_of(linear)};
}

}  // namespace tvlab::analysis
