#include "oracle.hpp"

#include <cmath>
#include <numbers>

namespace tvlab::ch01 {

DTensor2 to_double(const Tensor2& t) { return xt::cast<double>(t); }
DTensor1 to_double(const Tensor1& t) { return xt::cast<double>(t); }

DTensor2 norm_oracle(const DTensor2& x, const DTensor1& gamma, const DTensor1* beta, double eps) {
  const std::size_t rows = x.shape()[0], d = x.shape()[1];
  DTensor2 y = DTensor2::from_shape({rows, d});
  for (std::size_t t = 0; t < rows; ++t) {
    double mean = 0.0;
    if (beta) {
      for (std::size_t j = 0; j < d; ++j) mean += x(t, j) / static_cast<double>(d);
    }
    double ms = 0.0;  // mean square of the (centred) row
    for (std::size_t j = 0; j < d; ++j) ms += (x(t, j) - mean) * (x(t, j) - mean) / static_cast<double>(d);
    for (std::size_t j = 0; j < d; ++j)
      y(t, j) = gamma(j) * (x(t, j) - mean) / std::sqrt(ms + eps) + (beta ? (*beta)(j) : 0.0);
  }
  return y;
}

NumericGrads norm_finite_differences(const Tensor2& x, const Tensor1& gamma, const Tensor1* beta, const Tensor2& dy,
                                     double eps) {
  const std::size_t rows = x.shape()[0], d = x.shape()[1];
  DTensor2 xd = to_double(x);
  DTensor1 gd = to_double(gamma);
  DTensor1 bd = beta ? to_double(*beta) : DTensor1();
  const DTensor2 dyd = to_double(dy);
  // L restricted to rows [first, last): perturbing x(t, j) only changes row t.
  auto loss = [&](std::size_t first, std::size_t last) {
    const DTensor2 rows_x = xt::view(xd, xt::range(first, last), xt::all());
    const DTensor2 y = norm_oracle(rows_x, gd, beta ? &bd : nullptr, eps);
    double l = 0.0;
    for (std::size_t t = first; t < last; ++t)
      for (std::size_t j = 0; j < d; ++j) l += y(t - first, j) * dyd(t, j);
    return l;
  };
  // Central differences: truncation error O(h^2), rounding ~1e-16 / h; h = 1e-5 balances them.
  const double h = 1e-5;
  auto derivative = [&](double& value, std::size_t first, std::size_t last) {
    const double saved = value;
    value = saved + h;
    const double up = loss(first, last);
    value = saved - h;
    const double down = loss(first, last);
    value = saved;
    return (up - down) / (2 * h);
  };
  NumericGrads g{DTensor2::from_shape({rows, d}), DTensor1::from_shape({d}), {}};
  for (std::size_t t = 0; t < rows; ++t)
    for (std::size_t j = 0; j < d; ++j) g.dx(t, j) = derivative(xd(t, j), t, t + 1);
  for (std::size_t j = 0; j < d; ++j) g.dgamma(j) = derivative(gd(j), 0, rows);
  if (beta) {
    g.dbeta = DTensor1::from_shape({d});
    for (std::size_t j = 0; j < d; ++j) g.dbeta(j) = derivative(bd(j), 0, rows);
  }
  return g;
}

DTensor2 activation_oracle(const Tensor2& x, const std::function<double(double)>& f) {
  DTensor2 y = DTensor2::from_shape({x.shape()[0], x.shape()[1]});
  for (std::size_t i = 0; i < x.size(); ++i) y.data()[i] = f(x.data()[i]);
  return y;
}

// Phi(x) = erfc(-x / sqrt 2) / 2 (erfc keeps precision for x << 0 where 1 + erf cancels).
double gelu_exact(double x) { return x * 0.5 * std::erfc(-x / std::numbers::sqrt2); }
double gelu_tanh_formula(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}
double silu_formula(double x) { return x >= 0 ? x / (1.0 + std::exp(-x)) : x * std::exp(x) / (1.0 + std::exp(x)); }

DTensor2 ffn_oracle(const Tensor2& x, const FfnWeights& w, const std::function<double(double)>& f) {
  const std::size_t n = x.shape()[0], d = x.shape()[1], ff = w.w1.shape()[1];
  DTensor2 h = DTensor2::from_shape({n, ff});
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t j = 0; j < ff; ++j) {
      double a = w.b1.size() ? w.b1(j) : 0.0;
      for (std::size_t c = 0; c < d; ++c) a += static_cast<double>(x(t, c)) * w.w1(c, j);
      h(t, j) = f(a);
    }
  DTensor2 y = DTensor2::from_shape({n, d});
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t c = 0; c < d; ++c) {
      double a = w.b2.size() ? w.b2(c) : 0.0;
      for (std::size_t j = 0; j < ff; ++j) a += h(t, j) * w.w2(j, c);
      y(t, c) = a;
    }
  return y;
}

DTensor2 swiglu_oracle(const Tensor2& x, const SwigluWeights& w) {
  const std::size_t n = x.shape()[0], d = x.shape()[1], ff = w.w1.shape()[1];
  DTensor2 y = xt::zeros<double>({n, d});
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t j = 0; j < ff; ++j) {
      double gate = 0.0, up = 0.0;
      for (std::size_t c = 0; c < d; ++c) {
        gate += static_cast<double>(x(t, c)) * w.w1(c, j);
        up += static_cast<double>(x(t, c)) * w.w2(c, j);
      }
      const double hj = silu_formula(gate) * up;
      for (std::size_t c = 0; c < d; ++c) y(t, c) += hj * w.w3(j, c);
    }
  return y;
}

}  // namespace tvlab::ch01
