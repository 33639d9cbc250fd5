#include "tvlab/analysis/residual_stack.hpp"

#include <cmath>

#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/normalization.hpp"

namespace tvlab::analysis {

const char* norm_placement_name(NormPlacement p) { return p == NormPlacement::post_ln ? "Post-LN" : "Pre-LN"; }

namespace {

double rms(const Tensor2& t) {
  double s = 0.0;
  for (float v : t) s += static_cast<double>(v) * v;
  return std::sqrt(s / static_cast<double>(t.size()));
}

Tensor2 matmul(const Tensor2& a, const Tensor2& b) {  // [n, k] x [k, m]
  Tensor2 c = xt::zeros<float>({a.shape()[0], b.shape()[1]});
  for (std::size_t i = 0; i < a.shape()[0]; ++i)
    for (std::size_t k = 0; k < a.shape()[1]; ++k)
      for (std::size_t j = 0; j < b.shape()[1]; ++j) c(i, j) += a(i, k) * b(k, j);
  return c;
}

Tensor2 transpose(const Tensor2& a) { return xt::transpose(a); }

// F(x) = ReLU(x W1) W2 and its backward.
struct Block {
  Tensor2 w1, w2;
  Tensor2 forward(const Tensor2& x, Tensor2& pre) const {
    pre = matmul(x, w1);
    Tensor2 h = pre;
    for (auto& v : h) v = v > 0 ? v : 0;
    return matmul(h, w2);
  }
  Tensor2 backward(const Tensor2& pre, const Tensor2& dy) const {
    Tensor2 dh = matmul(dy, transpose(w2));
    for (std::size_t i = 0; i < dh.size(); ++i) dh.data()[i] *= pre.data()[i] > 0 ? 1.0f : 0.0f;
    return matmul(dh, transpose(w1));
  }
};

}  // namespace

ResidualStackTrace residual_stack(NormPlacement placement, int layers, int d_model, int tokens, std::uint64_t seed) {
  const char* fn = "residual_stack";
  require_positive(fn, "layers", layers);
  require_positive(fn, "d_model", d_model);
  require_positive(fn, "tokens", tokens);
  const std::size_t d = static_cast<std::size_t>(d_model), d_ff = 4 * d, n = static_cast<std::size_t>(tokens);
  Rng rng(seed);
  std::vector<Block> blocks;
  for (int l = 0; l < layers; ++l) {
    // He initialisation: std sqrt(2 / fan_in) keeps the ReLU branch's output scale ~ its input's.
    blocks.push_back({rng.normal_matrix(d, d_ff, 0, std::sqrt(2.0 / d)), rng.normal_matrix(d_ff, d, 0, std::sqrt(1.0 / d_ff))});
  }
  const Tensor1 gamma = xt::ones<float>({d}), beta = xt::zeros<float>({d});
  const Tensor2 x0 = rng.normal_matrix(n, d);
  const Tensor2 loss_direction = rng.normal_matrix(n, d);  // L = sum(output * loss_direction)

  // Forward, keeping what the backward needs.
  std::vector<Tensor2> inputs, normed, pre_activations, sums;
  Tensor2 x = x0;
  for (const Block& b : blocks) {
    inputs.push_back(x);
    Tensor2 pre;
    if (placement == NormPlacement::post_ln) {
      Tensor2 sum = x + b.forward(x, pre);
      sums.push_back(sum);
      x = ref::layer_norm(sum, gamma, beta);
    } else {
      Tensor2 h = ref::layer_norm(x, gamma, beta);
      normed.push_back(h);
      x = x + b.forward(h, pre);
    }
    pre_activations.push_back(pre);
  }
  Tensor2 final_input = x;
  ResidualStackTrace trace;
  for (const auto& t : inputs) trace.activation_rms.push_back(rms(t));
  trace.activation_rms.push_back(rms(final_input));

  // Backward from dL/d(output) = loss_direction; Pre-LN ends with a final LN.
  Tensor2 grad = loss_direction;
  if (placement == NormPlacement::pre_ln) grad = ref::layer_norm_backward(final_input, gamma, grad).dx;
  std::vector<double> grad_rms(static_cast<std::size_t>(layers) + 1);
  grad_rms.back() = rms(grad);
  for (int l = layers - 1; l >= 0; --l) {
    const Block& b = blocks[static_cast<std::size_t>(l)];
    const auto li = static_cast<std::size_t>(l);
    if (placement == NormPlacement::post_ln) {
      // x_{l+1} = LN(s), s = x_l + F(x_l): ds = LN'(dx_{l+1}), dx_l = ds + F'(ds).
      const Tensor2 ds = ref::layer_norm_backward(sums[li], gamma, grad).dx;
      grad = ds + b.backward(pre_activations[li], ds);
    } else {
      // x_{l+1} = x_l + F(LN(x_l)): dx_l = dx_{l+1} + LN'(F'(dx_{l+1})).
      const Tensor2 dh = b.backward(pre_activations[li], grad);
      grad = grad + ref::layer_norm_backward(inputs[li], gamma, dh).dx;
    }
    grad_rms[li] = rms(grad);
  }
  trace.gradient_rms = grad_rms;
  return trace;
}

}  // namespace tvlab::analysis
