#include "tvlab/ref/sinkhorn_router.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tvlab/core/error.hpp"

namespace tvlab::ref {
namespace {

// log sum_i exp(a_i), the largest term taken out first
double log_sum_exp(const std::vector<double>& a) {
  const double m = *std::max_element(a.begin(), a.end());
  double sum = 0.0;
  for (double v : a) sum += std::exp(v - m);
  return m + std::log(sum);
}

void check_marginals(const char* fn, const char* name, const std::vector<double>& m, std::size_t n, const char* what) {
  require(m.size() == n, fn, name, " has ", m.size(), " values, expected ", n, " (", what, ")");
  for (std::size_t i = 0; i < n; ++i)
    require(std::isfinite(m[i]) && m[i] > 0.0, fn, name, "[", i, "] (", m[i], ") must be positive and finite");
}

SinkhornPlan plan_for(const char* fn, const Tensor2& logits, const SinkhornConfig& cfg) {
  require_finite_logits(fn, logits);
  const std::size_t n = logits.shape()[0], num_experts = logits.shape()[1];
  require(std::isfinite(cfg.tolerance) && cfg.tolerance > 0.0, fn, "tolerance (", cfg.tolerance, ") must be positive");
  require_positive(fn, "max_iterations", cfg.max_iterations);
  // r: 1 per token unless given; c: the total of r spread evenly unless given
  std::vector<double> r = cfg.row_marginals.empty() ? std::vector<double>(n, 1.0) : cfg.row_marginals;
  check_marginals(fn, "row_marginals", r, n, "one per token");
  const double total_r = std::accumulate(r.begin(), r.end(), 0.0);
  std::vector<double> c = cfg.col_marginals.empty() ? std::vector<double>(num_experts, total_r / num_experts) : cfg.col_marginals;
  check_marginals(fn, "col_marginals", c, num_experts, "one per expert");
  const double total_c = std::accumulate(c.begin(), c.end(), 0.0);
  require(std::fabs(total_r - total_c) <= 1e-9 * std::max(total_r, total_c), fn, "the marginals' totals differ: row_marginals sum to ",
          total_r, ", col_marginals to ", total_c, " (both must count the same mass)");

  // f = log u, g = log v; T = exp(z + f_t + g_e)
  std::vector<double> f(n, 0.0), g(num_experts, 0.0), row(num_experts), col(n);
  SinkhornPlan out;
  for (std::size_t it = 1; it <= cfg.max_iterations; ++it) {
    // rows: f_t = log r_t - log sum_e exp(z_te + g_e)
    for (std::size_t t = 0; t < n; ++t) {
      for (std::size_t e = 0; e < num_experts; ++e) row[e] = logits(t, e) + g[e];
      f[t] = std::log(r[t]) - log_sum_exp(row);
    }
    // columns: g_e = log c_e - log sum_t exp(z_te + f_t)
    for (std::size_t e = 0; e < num_experts; ++e) {
      for (std::size_t t = 0; t < n; ++t) col[t] = logits(t, e) + f[t];
      g[e] = std::log(c[e]) - log_sum_exp(col);
    }
    // the columns are now exact; how far are the rows?
    double error = 0.0;
    for (std::size_t t = 0; t < n; ++t) {
      double sum = 0.0;
      for (std::size_t e = 0; e < num_experts; ++e) sum += std::exp(logits(t, e) + f[t] + g[e]);
      error = std::max(error, std::fabs(sum - r[t]));
    }
    out.iterations = it;
    out.row_error = error;
    if (error <= cfg.tolerance) {
      out.converged = true;
      break;
    }
  }
  out.plan = DTensor2::from_shape({n, num_experts});
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t e = 0; e < num_experts; ++e) out.plan(t, e) = std::exp(logits(t, e) + f[t] + g[e]);
  return out;
}

}  // namespace

SinkhornPlan sinkhorn_plan(const Tensor2& logits, const SinkhornConfig& cfg) { return plan_for("sinkhorn_plan", logits, cfg); }

Routing route_sinkhorn(const Tensor2& logits, std::size_t top_k, const SinkhornConfig& cfg) {
  const char* fn = "route_sinkhorn";
  require_nonempty(fn, "logits", logits);
  const std::size_t n = logits.shape()[0], num_experts = logits.shape()[1];
  require(top_k >= 1 && top_k < num_experts, fn, "top_k (", top_k, ") must be at least 1 and below the ", num_experts, " experts");
  const SinkhornPlan p = plan_for(fn, logits, cfg);
  require(p.converged, fn, "Sinkhorn did not converge in max_iterations (", cfg.max_iterations, "): row error ", p.row_error,
          " > tolerance ", cfg.tolerance);
  Routing r;
  r.tokens = n;
  r.num_experts = num_experts;
  std::vector<std::size_t> order(num_experts);
  for (std::size_t t = 0; t < n; ++t) {
    // the k largest T[t, e], ties to the lower expert
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return p.plan(t, a) > p.plan(t, b); });
    // gates: exp(z_i) / sum over the chosen exp(z_j) (the router's softmax, renormalised)
    double m = logits(t, order[0]);
    for (std::size_t j = 1; j < top_k; ++j) m = std::max(m, static_cast<double>(logits(t, order[j])));
    double sum = 0.0;
    for (std::size_t j = 0; j < top_k; ++j) sum += std::exp(logits(t, order[j]) - m);
    for (std::size_t j = 0; j < top_k; ++j) {
      r.token.push_back(t);
      r.expert.push_back(order[j]);
      r.gate.push_back(static_cast<float>(std::exp(logits(t, order[j]) - m) / sum));
    }
  }
  return r;
}

}  // namespace tvlab::ref
