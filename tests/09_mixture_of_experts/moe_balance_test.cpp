// Chapter 09, the balance objectives of the reference: the auxiliary loss in both normalisations
// against its definition, its value at a uniform router, its gradient (f frozen) against central
// differences of the loss, the router z-loss and its gradient, and errors.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "../common/testing.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/moe_balance.hpp"
#include "tvlab/ref/moe_router.hpp"

namespace tvlab {
namespace {

using tvlab::testing::throws_error_naming;

ref::RouterConfig config(std::size_t experts, std::size_t k) {
  ref::RouterConfig cfg;
  cfg.num_experts = experts;
  cfg.top_k = k;
  return cfg;
}

// The loss with f given (frozen), in double, from the definition: alpha E sum_i f_i P_i.
double aux_with_f(const DTensor2& z, const std::vector<double>& f, double alpha) {
  const std::size_t n = z.shape()[0], experts = z.shape()[1];
  std::vector<double> mean(experts, 0.0);
  for (std::size_t t = 0; t < n; ++t) {
    double m = z(t, 0), sum = 0.0;
    for (std::size_t e = 1; e < experts; ++e) m = std::max(m, z(t, e));
    for (std::size_t e = 0; e < experts; ++e) sum += std::exp(z(t, e) - m);
    for (std::size_t e = 0; e < experts; ++e) mean[e] += std::exp(z(t, e) - m) / sum / double(n);
  }
  double l = 0.0;
  for (std::size_t e = 0; e < experts; ++e) l += f[e] * mean[e];
  return alpha * double(experts) * l;
}

double z_loss_double(const DTensor2& z) {
  double total = 0.0;
  for (std::size_t t = 0; t < z.shape()[0]; ++t) {
    double m = z(t, 0), sum = 0.0;
    for (std::size_t e = 1; e < z.shape()[1]; ++e) m = std::max(m, z(t, e));
    for (std::size_t e = 0; e < z.shape()[1]; ++e) sum += std::exp(z(t, e) - m);
    total += (m + std::log(sum)) * (m + std::log(sum));
  }
  return total / double(z.shape()[0]);
}

DTensor2 to_double(const Tensor2& z) {
  DTensor2 d = DTensor2::from_shape({z.shape()[0], z.shape()[1]});
  for (std::size_t i = 0; i < z.size(); ++i) d.data()[i] = z.data()[i];
  return d;
}

// Uniform logits: P_i = 1/E exactly, and L_aux = alpha in the k-normalised form, alpha k in
// Mixtral's, whatever the routing (here the ties send every token to experts 0..k-1).
TEST(AuxLoss, uniform_logits_give_equal_shares_and_the_minimum) {
  for (const std::size_t experts : {4u, 8u, 64u})
    for (const std::size_t k : {1u, 2u, 3u}) {
      Tensor2 z = Tensor2::from_shape({32, experts});
      std::fill(z.begin(), z.end(), 0.0f);
      const Routing r = ref::route_top_k(z, config(experts, k));
      for (double p : ref::mean_router_probability(z)) EXPECT_NEAR(p, 1.0 / double(experts), 1e-15);
      EXPECT_NEAR(ref::load_balancing_loss(z, r, k, 0.01, ref::AuxLossNorm::k_normalised), 0.01, 1e-15) << experts << " experts, k " << k;
      EXPECT_NEAR(ref::load_balancing_loss(z, r, k, 0.01, ref::AuxLossNorm::mixtral), 0.01 * double(k), 1e-15)
          << experts << " experts, k " << k << ": Hugging Face Mixtral's form gives k";
    }
}

// Against the definition on a random router with its own top-2 routing: f from the loads, P the
// mean softmax; Mixtral's form is k times the k-normalised one; a skewed router scores above 1.
TEST(AuxLoss, matches_its_definition) {
  Rng rng(951);
  const std::size_t n = 50, experts = 8, k = 2;
  Tensor2 z = rng.normal_matrix(n, experts);
  for (std::size_t t = 0; t < n; ++t) z(t, 0) += 2.0f;  // expert 0 is favoured
  const Routing r = ref::route_top_k(z, config(experts, k));
  std::vector<double> f(experts, 0.0);
  for (std::size_t e : r.expert) f[e] += 1.0 / double(k * n);
  const double expected = aux_with_f(to_double(z), f, 1.0);
  // float logits, double sums of N = 50 terms: 1e-12 relative
  EXPECT_NEAR(ref::load_balancing_loss(z, r, k, 1.0), expected, 1e-12);
  EXPECT_NEAR(ref::load_balancing_loss(z, r, k, 1.0, ref::AuxLossNorm::mixtral), double(k) * expected, 1e-12);
  EXPECT_GT(expected, 1.5) << "a skewed router pays more than the uniform minimum of 1";
  const std::vector<double> fr = ref::routed_fraction(r, k, ref::AuxLossNorm::k_normalised);
  for (std::size_t e = 0; e < experts; ++e) EXPECT_DOUBLE_EQ(fr[e], f[e]);
}

// The gradient with f frozen against central differences of alpha E sum f_i P_i(z): step 1e-5 in
// double gives truncation ~h^2 |L'''| ~ 1e-10 and round-off ~1e-16 / 1e-5 = 1e-11; tolerance 1e-8.
TEST(AuxLoss, gradient_matches_finite_differences_with_f_frozen) {
  Rng rng(952);
  const std::size_t n = 9, experts = 5, k = 2;
  const Tensor2 z = rng.normal_matrix(n, experts, 0.0, 1.5);
  const Routing r = ref::route_top_k(z, config(experts, k));
  for (const auto norm : {ref::AuxLossNorm::k_normalised, ref::AuxLossNorm::mixtral}) {
    const std::vector<double> f = ref::routed_fraction(r, k, norm);
    const DTensor2 grad = ref::load_balancing_loss_grad(z, r, k, 0.3, norm);
    const DTensor2 base = to_double(z);
    const double h = 1e-5;
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t e = 0; e < experts; ++e) {
        DTensor2 plus = base, minus = base;
        plus(t, e) += h, minus(t, e) -= h;
        const double numeric = (aux_with_f(plus, f, 0.3) - aux_with_f(minus, f, 0.3)) / (2.0 * h);
        EXPECT_NEAR(grad(t, e), numeric, 1e-8) << "(" << t << ", " << e << ")";
      }
    // each token's gradient sums to 0: softmax is unchanged by adding a constant to a row
    for (std::size_t t = 0; t < n; ++t) {
      double row = 0.0;
      for (std::size_t e = 0; e < experts; ++e) row += grad(t, e);
      EXPECT_NEAR(row, 0.0, 1e-15);
    }
  }
}

// z-loss: (ln E)^2 at zero logits, the definition elsewhere; shifting the logits changes it (unlike
// the softmax), and its gradient matches central differences (as above).
TEST(ZLoss, zeros_give_log_e_squared_and_the_gradient_matches_finite_differences) {
  for (const std::size_t experts : {2u, 8u, 256u}) {
    Tensor2 z = Tensor2::from_shape({7, experts});
    std::fill(z.begin(), z.end(), 0.0f);
    const double ln_e = std::log(double(experts));
    EXPECT_NEAR(ref::router_z_loss(z), ln_e * ln_e, 1e-14) << experts << " experts";
  }
  Rng rng(953);
  const Tensor2 z = rng.normal_matrix(6, 4, 0.0, 3.0);
  EXPECT_NEAR(ref::router_z_loss(z), z_loss_double(to_double(z)), 1e-12);
  Tensor2 shifted = z + 5.0f;
  EXPECT_GT(ref::router_z_loss(shifted), ref::router_z_loss(z)) << "larger logits pay more: the point of the z-loss";
  const DTensor2 grad = ref::router_z_loss_grad(z);
  const DTensor2 base = to_double(z);
  const double h = 1e-5;
  for (std::size_t t = 0; t < 6; ++t)
    for (std::size_t e = 0; e < 4; ++e) {
      DTensor2 plus = base, minus = base;
      plus(t, e) += h, minus(t, e) -= h;
      EXPECT_NEAR(grad(t, e), (z_loss_double(plus) - z_loss_double(minus)) / (2.0 * h), 1e-8) << "(" << t << ", " << e << ")";
    }
  // huge logits stay finite (the largest is taken out of the exponentials)
  Tensor2 huge = z;
  huge(0, 0) = 1e4f;
  EXPECT_NEAR(ref::router_z_loss(huge), z_loss_double(to_double(huge)), 1e-12 * 1e8 / 6);
}

TEST(Balance, bad_input_is_named) {
  Rng rng(954);
  const Tensor2 z = rng.normal_matrix(5, 4);
  const Routing r = ref::route_top_k(z, config(4, 2));
  EXPECT_TRUE(throws_error_naming([&] { ref::load_balancing_loss(z, r, 0, 1.0); }, {"load_balancing_loss", "top_k"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::load_balancing_loss(z, r, 2, std::nan("")); }, {"load_balancing_loss", "alpha"}));
  const Tensor2 other = rng.normal_matrix(6, 4);
  EXPECT_TRUE(throws_error_naming([&] { ref::load_balancing_loss(other, r, 2, 1.0); }, {"load_balancing_loss", "5 tokens"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::load_balancing_loss_grad(other, r, 2, 1.0); }, {"load_balancing_loss_grad", "5 tokens"}));
  Tensor2 nan = z;
  nan(2, 3) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { ref::router_z_loss(nan); }, {"router_z_loss", "token 2, expert 3"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::router_z_loss_grad(nan); }, {"router_z_loss_grad", "token 2"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::mean_router_probability(nan); }, {"mean_router_probability", "token 2"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::router_z_loss(Tensor2::from_shape({0, 4})); }, {"router_z_loss", "logits"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::routed_fraction(r, 0, ref::AuxLossNorm::mixtral); }, {"routed_fraction", "top_k"}));
}

}  // namespace
}  // namespace tvlab
