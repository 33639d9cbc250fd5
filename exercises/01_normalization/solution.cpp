// Chapter 01 exercises: worked solutions. Each marked region is what a student writes;
// scripts/make_student.py turns this file into student.cpp with the regions replaced by
// NotImplemented stubs. Edit this file, then regenerate (`make student-stubs`).

#include <cmath>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/student/ffn.hpp"
#include "tvlab/student/normalization.hpp"

namespace tvlab::student {

Tensor2 rms_norm(const Tensor2& x, const Tensor1& gamma, double eps) {
  // BEGIN EXERCISE 01.1 "RMSNorm forward" "RMSNorm"
  validate_norm("rms_norm", NormKind::rms_norm, x, gamma, nullptr, nullptr, eps);
  const std::size_t rows = x.shape()[0], d = x.shape()[1];
  Tensor2 y = Tensor2::from_shape({rows, d});
  for (std::size_t t = 0; t < rows; ++t) {
    double mean_square = 0.0;
    for (std::size_t j = 0; j < d; ++j) mean_square += static_cast<double>(x(t, j)) * x(t, j);
    const double r = std::sqrt(mean_square / static_cast<double>(d) + eps);
    for (std::size_t j = 0; j < d; ++j) y(t, j) = static_cast<float>(gamma(j) * x(t, j) / r);
  }
  return y;
  // END EXERCISE
}

RmsNormGrads rms_norm_backward(const Tensor2& x, const Tensor1& gamma, const Tensor2& dy, double eps) {
  // BEGIN EXERCISE 01.2 "RMSNorm backward (dx and dgamma)" "The backward pass of RMSNorm"
  validate_norm("rms_norm_backward", NormKind::rms_norm, x, gamma, nullptr, &dy, eps);
  const std::size_t rows = x.shape()[0], d = x.shape()[1];
  RmsNormGrads g{Tensor2::from_shape({rows, d}), xt::zeros<float>({d})};
  std::vector<double> dgamma(d, 0.0);
  for (std::size_t t = 0; t < rows; ++t) {
    double mean_square = 0.0;
    for (std::size_t j = 0; j < d; ++j) mean_square += static_cast<double>(x(t, j)) * x(t, j);
    const double r = std::sqrt(mean_square / static_cast<double>(d) + eps);
    double mean_gx = 0.0;  // mean_j gamma_j dy_j xhat_j
    for (std::size_t j = 0; j < d; ++j) {
      mean_gx += gamma(j) * static_cast<double>(dy(t, j)) * x(t, j) / r;
      dgamma[j] += dy(t, j) * x(t, j) / r;
    }
    mean_gx /= static_cast<double>(d);
    for (std::size_t j = 0; j < d; ++j)
      g.dx(t, j) = static_cast<float>((gamma(j) * static_cast<double>(dy(t, j)) - x(t, j) / r * mean_gx) / r);
  }
  for (std::size_t j = 0; j < d; ++j) g.dgamma(j) = static_cast<float>(dgamma[j]);
  return g;
  // END EXERCISE
}

Tensor2 ffn_swiglu(const Tensor2& x, const SwigluWeights& w) {
  // BEGIN EXERCISE 01.3 "the SwiGLU feed-forward network" "SwiGLU"
  const std::size_t d_ff = validate_swiglu("ffn_swiglu", x, w);
  const std::size_t tokens = x.shape()[0], d_model = x.shape()[1];
  Tensor2 y = xt::zeros<float>({tokens, d_model});
  std::vector<double> h(d_ff);
  for (std::size_t t = 0; t < tokens; ++t) {
    for (std::size_t j = 0; j < d_ff; ++j) {
      double gate = 0.0, up = 0.0;
      for (std::size_t c = 0; c < d_model; ++c) {
        gate += static_cast<double>(x(t, c)) * w.w1(c, j);
        up += static_cast<double>(x(t, c)) * w.w2(c, j);
      }
      h[j] = gate / (1.0 + std::exp(-gate)) * up;  // Swish(gate) * up
    }
    for (std::size_t c = 0; c < d_model; ++c) {
      double acc = 0.0;
      for (std::size_t j = 0; j < d_ff; ++j) acc += h[j] * w.w3(j, c);
      y(t, c) = static_cast<float>(acc);
    }
  }
  return y;
  // END EXERCISE
}

}  // namespace tvlab::student
