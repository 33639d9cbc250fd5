#include "tvlab/analysis/scaling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::analysis {

double softmax_jacobian_frobenius(const double* p, int n) {
  require(p != nullptr, "softmax_jacobian_frobenius", "p must not be null");
  require_positive("softmax_jacobian_frobenius", "n", n);
  double sum_sq = 0.0, diag_part = 0.0;
  for (int i = 0; i < n; ++i) {
    sum_sq += p[i] * p[i];
    diag_part += p[i] * p[i] * (1.0 - 2.0 * p[i]);
  }
  return std::sqrt(std::max(0.0, diag_part + sum_sq * sum_sq));
}

namespace {

// Stable softmax of `s` into `p`; returns max_j p_j.
double softmax_into(const std::vector<double>& s, std::vector<double>& p) {
  double m = -std::numeric_limits<double>::infinity();
  for (double x : s) m = std::max(m, x);
  double l = 0.0;
  for (std::size_t j = 0; j < s.size(); ++j) l += (p[j] = std::exp(s[j] - m));
  double top = 0.0;
  for (double& x : p) top = std::max(top, x /= l);
  return top;
}

}  // namespace

ScalingStats dot_product_scaling(int head_dim, int rows, int seq, std::uint64_t seed) {
  const char* fn = "dot_product_scaling";
  require_positive(fn, "head_dim", head_dim);
  require_positive(fn, "rows", rows);
  require_positive(fn, "seq", seq);
  Rng rng(seed);
  ScalingStats st;
  st.head_dim = head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  std::vector<double> q(head_dim), s(seq), s_scaled(seq), p(seq);
  double sum = 0, sum_sq = 0;  // of the unscaled dot products
  std::vector<double> jac_unscaled, jac_scaled;
  for (int r = 0; r < rows; ++r) {
    for (double& x : q) x = rng.normal();
    for (int j = 0; j < seq; ++j) {
      double dot = 0.0;
      for (int c = 0; c < head_dim; ++c) dot += q[c] * rng.normal();  // a fresh key k_j
      s[j] = dot;
      s_scaled[j] = dot * scale;
      sum += dot;
      sum_sq += dot * dot;
    }
    st.max_weight_unscaled += softmax_into(s, p);
    jac_unscaled.push_back(softmax_jacobian_frobenius(p.data(), seq));
    st.max_weight_scaled += softmax_into(s_scaled, p);
    jac_scaled.push_back(softmax_jacobian_frobenius(p.data(), seq));
  }
  const double count = static_cast<double>(rows) * seq;
  const double mean = sum / count;
  st.var_unscaled = (sum_sq - count * mean * mean) / (count - (count > 1 ? 1 : 0));
  st.var_scaled = st.var_unscaled * scale * scale;
  st.max_weight_unscaled /= rows;
  st.max_weight_scaled /= rows;
  // The median, not the mean: rows whose top two logits happen to tie keep a large Jacobian
  // even when most rows are saturated, and a mean would be dominated by those few rows.
  auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  st.jacobian_unscaled = median(jac_unscaled);
  st.jacobian_scaled = median(jac_scaled);
  return st;
}

}  // namespace tvlab::analysis
