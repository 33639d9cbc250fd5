#include "tvlab/ref/moe_balance.hpp"

#include <algorithm>
#include <cmath>

#include "tvlab/core/error.hpp"
#include "tvlab/ref/moe_router.hpp"

namespace tvlab::ref {
namespace {


std::vector<double> fractions_for(const char* fn, const Tensor2& logits, const Routing& r, std::size_t top_k, double alpha,
                                  AuxLossNorm norm) {
  require_finite_logits(fn, logits);
  validate_routing(fn, r, logits.shape()[0], logits.shape()[1]);
  require_positive(fn, "top_k", top_k);
  require(std::isfinite(alpha), fn, "alpha (", alpha, ") must be finite");
  // f_i = load_i / (k N)  or  load_i / N
  const std::vector<std::size_t> load = expert_load(r);
  const double per = static_cast<double>(r.tokens) * (norm == AuxLossNorm::k_normalised ? static_cast<double>(top_k) : 1.0);
  std::vector<double> f(load.size());
  for (std::size_t i = 0; i < load.size(); ++i) f[i] = static_cast<double>(load[i]) / per;
  return f;
}

}  // namespace

std::vector<double> mean_router_probability(const Tensor2& logits) {
  require_finite_logits("mean_router_probability", logits);
  const std::size_t n = logits.shape()[0], num_experts = logits.shape()[1];
  // P_i = (1/N) sum_t p_ti
  std::vector<double> mean(num_experts, 0.0), p;
  for (std::size_t t = 0; t < n; ++t) {
    softmax_row(logits, t, p);
    for (std::size_t i = 0; i < num_experts; ++i) mean[i] += p[i];
  }
  for (double& v : mean) v /= static_cast<double>(n);
  return mean;
}

std::vector<double> routed_fraction(const Routing& r, std::size_t top_k, AuxLossNorm norm) {
  const char* fn = "routed_fraction";
  validate_routing(fn, r, r.tokens, r.num_experts);
  require_positive(fn, "top_k", top_k);
  require_positive(fn, "tokens", r.tokens);
  const std::vector<std::size_t> load = expert_load(r);
  const double per = static_cast<double>(r.tokens) * (norm == AuxLossNorm::k_normalised ? static_cast<double>(top_k) : 1.0);
  std::vector<double> f(load.size());
  for (std::size_t i = 0; i < load.size(); ++i) f[i] = static_cast<double>(load[i]) / per;
  return f;
}

double load_balancing_loss(const Tensor2& logits, const Routing& r, std::size_t top_k, double alpha, AuxLossNorm norm) {
  const std::vector<double> f = fractions_for("load_balancing_loss", logits, r, top_k, alpha, norm);
  const std::vector<double> mean_p = mean_router_probability(logits);
  // L = alpha E sum_i f_i P_i
  double sum = 0.0;
  for (std::size_t i = 0; i < f.size(); ++i) sum += f[i] * mean_p[i];
  return alpha * static_cast<double>(f.size()) * sum;
}

DTensor2 load_balancing_loss_grad(const Tensor2& logits, const Routing& r, std::size_t top_k, double alpha, AuxLossNorm norm) {
  const std::vector<double> f = fractions_for("load_balancing_loss_grad", logits, r, top_k, alpha, norm);
  const std::size_t n = logits.shape()[0], num_experts = logits.shape()[1];
  DTensor2 grad = DTensor2::from_shape({n, num_experts});
  std::vector<double> p;
  const double scale = alpha * static_cast<double>(num_experts) / static_cast<double>(n);
  for (std::size_t t = 0; t < n; ++t) {
    softmax_row(logits, t, p);
    // dL/dz_tj = (alpha E / N) p_tj (f_j - sum_i f_i p_ti)   (f constant)
    double fp = 0.0;
    for (std::size_t i = 0; i < num_experts; ++i) fp += f[i] * p[i];
    for (std::size_t j = 0; j < num_experts; ++j) grad(t, j) = scale * p[j] * (f[j] - fp);
  }
  return grad;
}

double router_z_loss(const Tensor2& logits) {
  require_finite_logits("router_z_loss", logits);
  const std::size_t n = logits.shape()[0];
  // L_z = (1/N) sum_t (log sum_j exp z_tj)^2
  std::vector<double> p;
  double sum = 0.0;
  for (std::size_t t = 0; t < n; ++t) {
    const double lse = softmax_row(logits, t, p);
    sum += lse * lse;
  }
  return sum / static_cast<double>(n);
}

DTensor2 router_z_loss_grad(const Tensor2& logits) {
  require_finite_logits("router_z_loss_grad", logits);
  const std::size_t n = logits.shape()[0], num_experts = logits.shape()[1];
  DTensor2 grad = DTensor2::from_shape({n, num_experts});
  std::vector<double> p;
  for (std::size_t t = 0; t < n; ++t) {
    // dL_z/dz_tj = (2/N) lse_t p_tj
    const double lse = softmax_row(logits, t, p);
    for (std::size_t j = 0; j < num_experts; ++j) grad(t, j) = 2.0 / static_cast<double>(n) * lse * p[j];
  }
  return grad;
}

std::vector<float> update_bias(const std::vector<float>& bias, const std::vector<std::size_t>& load, float gamma) {
  const char* fn = "update_bias";
  require(!bias.empty(), fn, "bias must not be empty (one value per expert)");
  require(load.size() == bias.size(), fn, "load has ", load.size(), " values, bias ", bias.size(), " (one per expert each)");
  require(std::isfinite(gamma) && gamma > 0.0f, fn, "gamma (", gamma, ") must be positive and finite");
  for (std::size_t i = 0; i < bias.size(); ++i) require(std::isfinite(bias[i]), fn, "bias[", i, "] is not finite (", bias[i], ")");
  // the mean load, in double: sum_j L_j / E
  double total = 0.0;
  for (std::size_t l : load) total += static_cast<double>(l);
  const double mean = total / static_cast<double>(load.size());
  // b_i + gamma sign(mean - L_i): overloaded down, underloaded up, exactly at the mean unchanged
  std::vector<float> out(bias);
  for (std::size_t i = 0; i < bias.size(); ++i) {
    const double deviation = mean - static_cast<double>(load[i]);
    if (deviation > 0.0) out[i] = bias[i] + gamma;
    if (deviation < 0.0) out[i] = bias[i] - gamma;
  }
  return out;
}

}  // namespace tvlab::ref
