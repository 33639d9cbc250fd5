#include "tvlab/ref/normalization.hpp"

#include <cmath>

namespace tvlab::ref {

Tensor2 layer_norm(const Tensor2& x, const Tensor1& gamma, const Tensor1& beta, double eps) {
  validate_norm("layer_norm", NormKind::layer_norm, x, gamma, &beta, nullptr, eps);
  const std::size_t rows = x.shape()[0], d = x.shape()[1];
  Tensor2 y = Tensor2::from_shape({rows, d});
  for (std::size_t t = 0; t < rows; ++t) {
    // mu = (1/d) sum_j x_j
    double mu = 0.0;
    for (std::size_t j = 0; j < d; ++j) mu += x(t, j);
    mu /= static_cast<double>(d);
    // sigma^2 = (1/d) sum_j (x_j - mu)^2   (two passes: no cancellation)
    double var = 0.0;
    for (std::size_t j = 0; j < d; ++j) var += (x(t, j) - mu) * (x(t, j) - mu);
    var /= static_cast<double>(d);
    // y_j = gamma_j (x_j - mu) / sqrt(sigma^2 + eps) + beta_j
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (std::size_t j = 0; j < d; ++j) y(t, j) = static_cast<float>(gamma(j) * (x(t, j) - mu) * rstd + beta(j));
  }
  return y;
}

LayerNormGrads layer_norm_backward(const Tensor2& x, const Tensor1& gamma, const Tensor2& dy, double eps) {
  validate_norm("layer_norm_backward", NormKind::layer_norm, x, gamma, nullptr, &dy, eps);
  const std::size_t rows = x.shape()[0], d = x.shape()[1];
  LayerNormGrads g{Tensor2::from_shape({rows, d}), Tensor1::from_shape({d}), Tensor1::from_shape({d})};
  DTensor1 dgamma = xt::zeros<double>({d}), dbeta = xt::zeros<double>({d});
  DTensor1 xhat = DTensor1::from_shape({d});
  for (std::size_t t = 0; t < rows; ++t) {
    double mu = 0.0;
    for (std::size_t j = 0; j < d; ++j) mu += x(t, j);
    mu /= static_cast<double>(d);
    double var = 0.0;
    for (std::size_t j = 0; j < d; ++j) var += (x(t, j) - mu) * (x(t, j) - mu);
    var /= static_cast<double>(d);
    const double rstd = 1.0 / std::sqrt(var + eps);
    // g_j = gamma_j dy_j;  mean_g = mean(g);  mean_gx = mean(g * xhat)
    double mean_g = 0.0, mean_gx = 0.0;
    for (std::size_t j = 0; j < d; ++j) {
      xhat(j) = (x(t, j) - mu) * rstd;
      const double gj = gamma(j) * static_cast<double>(dy(t, j));
      mean_g += gj;
      mean_gx += gj * xhat(j);
      dgamma(j) += dy(t, j) * xhat(j);
      dbeta(j) += dy(t, j);
    }
    mean_g /= static_cast<double>(d);
    mean_gx /= static_cast<double>(d);
    // dx_j = rstd (g_j - mean_g - xhat_j mean_gx)
    for (std::size_t j = 0; j < d; ++j) {
      const double gj = gamma(j) * static_cast<double>(dy(t, j));
      g.dx(t, j) = static_cast<float>(rstd * (gj - mean_g - xhat(j) * mean_gx));
    }
  }
  for (std::size_t j = 0; j < d; ++j) {
    g.dgamma(j) = static_cast<float>(dgamma(j));
    g.dbeta(j) = static_cast<float>(dbeta(j));
  }
  return g;
}

Tensor2 rms_norm(const Tensor2& x, const Tensor1& gamma, double eps) {
  validate_norm("rms_norm", NormKind::rms_norm, x, gamma, nullptr, nullptr, eps);
  const std::size_t rows = x.shape()[0], d = x.shape()[1];
  Tensor2 y = Tensor2::from_shape({rows, d});
  for (std::size_t t = 0; t < rows; ++t) {
    // r = sqrt((1/d) sum_j x_j^2 + eps)
    double mean_square = 0.0;
    for (std::size_t j = 0; j < d; ++j) mean_square += static_cast<double>(x(t, j)) * x(t, j);
    mean_square /= static_cast<double>(d);
    const double r = std::sqrt(mean_square + eps);
    // y_j = gamma_j x_j / r
    for (std::size_t j = 0; j < d; ++j) y(t, j) = static_cast<float>(gamma(j) * x(t, j) / r);
  }
  return y;
}

RmsNormGrads rms_norm_backward(const Tensor2& x, const Tensor1& gamma, const Tensor2& dy, double eps) {
  validate_norm("rms_norm_backward", NormKind::rms_norm, x, gamma, nullptr, &dy, eps);
  const std::size_t rows = x.shape()[0], d = x.shape()[1];
  RmsNormGrads g{Tensor2::from_shape({rows, d}), Tensor1::from_shape({d})};
  DTensor1 dgamma = xt::zeros<double>({d});
  for (std::size_t t = 0; t < rows; ++t) {
    double mean_square = 0.0;
    for (std::size_t j = 0; j < d; ++j) mean_square += static_cast<double>(x(t, j)) * x(t, j);
    mean_square /= static_cast<double>(d);
    const double r = std::sqrt(mean_square + eps);
    // mean_gx = mean_j (gamma_j dy_j xhat_j),  xhat_j = x_j / r
    double mean_gx = 0.0;
    for (std::size_t j = 0; j < d; ++j) {
      const double xhat = x(t, j) / r;
      mean_gx += gamma(j) * static_cast<double>(dy(t, j)) * xhat;
      dgamma(j) += dy(t, j) * xhat;
    }
    mean_gx /= static_cast<double>(d);
    // dx_j = (gamma_j dy_j - xhat_j mean_gx) / r
    for (std::size_t j = 0; j < d; ++j) {
      const double xhat = x(t, j) / r;
      g.dx(t, j) = static_cast<float>((gamma(j) * static_cast<double>(dy(t, j)) - xhat * mean_gx) / r);
    }
  }
  for (std::size_t j = 0; j < d; ++j) g.dgamma(j) = static_cast<float>(dgamma(j));
  return g;
}

}  // namespace tvlab::ref
