// Host-tensor entry points of the CUDA normalizations: validate, upload, launch, download.
// Compiled with or without nvcc.

#include "tvlab/cuda/normalization.hpp"
#include "tvlab/cuda/normalization_device.hpp"
#include "tvlab/cuda/runtime.hpp"

namespace tvlab::cuda {
namespace {

Tensor2 forward(bool layer_norm, const Tensor2& x, const Tensor1& gamma, const Tensor1* beta, double eps) {
  DeviceBuffer<float> dx(x.data(), x.size()), dgamma(gamma.data(), gamma.size()), dy(x.size());
  DeviceBuffer<float> dbeta;
  if (beta) dbeta = DeviceBuffer<float>(beta->data(), beta->size());
  const device::NormArgs args{.x = dx.get(), .gamma = dgamma.get(), .beta = dbeta.get(), .y = dy.get(),
                              .rows = x.shape()[0], .cols = x.shape()[1], .eps = eps};
  if (layer_norm) {
    device::layer_norm_forward(args);
  } else {
    device::rms_norm_forward(args);
  }
  Tensor2 y = Tensor2::from_shape({args.rows, args.cols});
  dy.download(y.data());
  return y;
}

// Runs the backward kernels; returns dx and fills dgamma (and dbeta when given).
Tensor2 backward(bool layer_norm, const Tensor2& x, const Tensor1& gamma, const Tensor2& dy, double eps,
                 Tensor1& dgamma, Tensor1* dbeta) {
  const std::size_t rows = x.shape()[0], cols = x.shape()[1];
  DeviceBuffer<float> dev_x(x.data(), x.size()), dev_gamma(gamma.data(), gamma.size()), dev_dy(dy.data(), dy.size());
  DeviceBuffer<float> dev_dx(x.size()), dev_dgamma(cols), dev_dbeta(cols), stats(2 * rows);
  const device::NormBackwardArgs args{.x = dev_x.get(), .gamma = dev_gamma.get(), .dy = dev_dy.get(),
                                      .dx = dev_dx.get(), .dgamma = dev_dgamma.get(), .dbeta = dev_dbeta.get(),
                                      .stats = stats.get(), .rows = rows, .cols = cols, .eps = eps};
  if (layer_norm) {
    device::layer_norm_backward(args);
  } else {
    device::rms_norm_backward(args);
  }
  Tensor2 dx = Tensor2::from_shape({rows, cols});
  dev_dx.download(dx.data());
  dgamma = Tensor1::from_shape({cols});
  dev_dgamma.download(dgamma.data());
  if (dbeta) {
    *dbeta = Tensor1::from_shape({cols});
    dev_dbeta.download(dbeta->data());
  }
  return dx;
}

}  // namespace

Tensor2 layer_norm(const Tensor2& x, const Tensor1& gamma, const Tensor1& beta, double eps) {
  validate_norm("layer_norm", NormKind::layer_norm, x, gamma, &beta, nullptr, eps);
  return forward(true, x, gamma, &beta, eps);
}

Tensor2 rms_norm(const Tensor2& x, const Tensor1& gamma, double eps) {
  validate_norm("rms_norm", NormKind::rms_norm, x, gamma, nullptr, nullptr, eps);
  return forward(false, x, gamma, nullptr, eps);
}

LayerNormGrads layer_norm_backward(const Tensor2& x, const Tensor1& gamma, const Tensor2& dy, double eps) {
  validate_norm("layer_norm_backward", NormKind::layer_norm, x, gamma, nullptr, &dy, eps);
  LayerNormGrads g;
  g.dx = backward(true, x, gamma, dy, eps, g.dgamma, &g.dbeta);
  return g;
}

RmsNormGrads rms_norm_backward(const Tensor2& x, const Tensor1& gamma, const Tensor2& dy, double eps) {
  validate_norm("rms_norm_backward", NormKind::rms_norm, x, gamma, nullptr, &dy, eps);
  RmsNormGrads g;
  g.dx = backward(false, x, gamma, dy, eps, g.dgamma, nullptr);
  return g;
}

}  // namespace tvlab::cuda
