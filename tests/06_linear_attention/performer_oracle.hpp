#pragma once
// What chapter 06's Performer tests over the backends share (performer_suite_test.cpp,
// opt_performer_test.cpp): Performer attention in double from its definition, and the tolerance
// a float implementation must meet against it.

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <vector>

#include "tvlab/core/compare.hpp"
#include "tvlab/core/performer_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ch06_testing {

/// d^{-1/4}: attention's scale of q and k, so that q^ . k^ = q . k / sqrt(d).
inline double attention_input_scale(std::size_t d) { return std::pow(static_cast<double>(d), -0.25); }

/// x^ = scale x, row i of head `head`, in double.
inline std::vector<double> scaled_row(const Tensor3& x, std::size_t head, std::size_t i, double scale) {
  const std::size_t d = x.shape()[2];
  std::vector<double> row(d);
  for (std::size_t c = 0; c < d; ++c) row[c] = scale * x(head, i, c);
  return row;
}

/// phi+(x^)_r = exp(omega_r^T x^ - |x^|^2 / 2) / sqrt(m), in double.
inline std::vector<double> positive_features(const std::vector<double>& x, const DTensor2& w) {
  const std::size_t m = w.shape()[0], d = w.shape()[1];
  double half_squared_norm = 0.0;
  for (double x_c : x) half_squared_norm += 0.5 * x_c * x_c;
  std::vector<double> phi(m);
  for (std::size_t r = 0; r < m; ++r) {
    double e = -half_squared_norm;
    for (std::size_t c = 0; c < d; ++c) e += w(r, c) * x[c];
    phi[r] = std::exp(e) / std::sqrt(static_cast<double>(m));
  }
  return phi;
}

/// o_i = sum_j kappa_ij v_j / sum_j kappa_ij with kappa_ij = phi+(q^_i) . phi+(k^_j), over every key
/// or j <= i when causal: Performer attention from its definition, one product at a time, in double.
inline DTensor3 performer_oracle(const Tensor3& q, const Tensor3& k, const Tensor3& v, const PerformerFeatures& f,
                                 bool causal) {
  const std::size_t h = q.shape()[0], n_q = q.shape()[1], n_k = k.shape()[1], d_v = v.shape()[2];
  DTensor3 o = xt::zeros<double>({h, n_q, d_v});
  const double scale = attention_input_scale(f.head_dim());
  for (std::size_t head = 0; head < h; ++head) {
    std::vector<std::vector<double>> phi_k(n_k);
    for (std::size_t j = 0; j < n_k; ++j) phi_k[j] = positive_features(scaled_row(k, head, j, scale), f.w);
    for (std::size_t i = 0; i < n_q; ++i) {
      const std::vector<double> phi_q = positive_features(scaled_row(q, head, i, scale), f.w);
      double denominator = 0.0;
      for (std::size_t j = 0; j < (causal ? i + 1 : n_k); ++j) {
        double kappa = 0.0;
        for (std::size_t r = 0; r < phi_q.size(); ++r) kappa += phi_q[r] * phi_k[j][r];
        denominator += kappa;
        for (std::size_t e = 0; e < d_v; ++e) o(head, i, e) += kappa * v(head, j, e);
      }
      for (std::size_t e = 0; e < d_v; ++e) o(head, i, e) /= denominator;
    }
  }
  return o;
}

/// The largest sum of |terms| of an exponent, sum_c |omega_rc x^_c| + |x^|^2/2, over every row
/// x^ = scale x of the tensors and every feature r: a float exponent carries an absolute error of
/// about reduction_rtol(d) times it.
inline double exponent_magnitude(std::initializer_list<const Tensor3*> tensors, double scale, const PerformerFeatures& f) {
  const std::size_t m = f.num_features(), d = f.head_dim();
  double largest = 0.0;
  for (const Tensor3* x : tensors)
    for (std::size_t head = 0; head < x->shape()[0]; ++head)
      for (std::size_t i = 0; i < x->shape()[1]; ++i) {
        const std::vector<double> row = scaled_row(*x, head, i, scale);
        double half_squared_norm = 0.0;
        for (double x_c : row) half_squared_norm += 0.5 * x_c * x_c;
        for (std::size_t r = 0; r < m; ++r) {
          double terms = half_squared_norm;
          for (std::size_t c = 0; c < d; ++c) terms += std::fabs(f.w(r, c) * row[c]);
          largest = std::max(largest, terms);
        }
      }
  return largest;
}

/// The tolerance of a float Performer against the double oracle, absolute in units of max|v|.
/// - A feature exp(e - shift) carries the float errors of e and of the shift (each within
///   reduction_rtol(d) E, E = `exponent_magnitude` of q and k) and the exp's own (2 ulps): relative
///   delta = 2 reduction_rtol(d) E + 2 eps.
/// - kappa_ij, a sum of products of two features, is within 2 delta relative; the output is a
///   weighted average of the v_j, which relative errors eps of its weights move by at most
///   2 eps max|v|: 4 delta max|v|.
/// - The sums over keys and features (S = phi(K)^T V, phi(q)^T S and the normaliser) add
///   reduction_rtol(n_k + m) of their sum of |terms|, at most max|v| times the normaliser, in the
///   numerator and in the normaliser: 2 reduction_rtol(n_k + m) max|v|.
/// The double reference rounds once to float (6e-8 relative): the 1e-7 floor.
inline Tolerance performer_tolerance(const Tensor3& q, const Tensor3& k, const Tensor3& v, const PerformerFeatures& f) {
  const double max_v = static_cast<double>(xt::amax(xt::abs(v))());
  const double magnitude = exponent_magnitude({&q, &k}, attention_input_scale(f.head_dim()), f);
  const double delta = 2.0 * reduction_rtol(f.head_dim()) * magnitude + 2.0 * FLT_EPSILON;
  const double sums = 2.0 * reduction_rtol(k.shape()[1] + f.num_features());
  return {(4.0 * delta + sums) * max_v + 1e-7, 0.0};
}

}  // namespace tvlab::ch06_testing
