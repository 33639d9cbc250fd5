#include "tvlab/opt/ffn.hpp"

#include <vector>

#include "detail/activation_ops.hpp"
#include "detail/blas.hpp"

namespace tvlab::opt {
namespace {

// H = f(x W1 + b1) with the bias and activation fused into one pass over H (the SGEMM
// output is still in cache per row block), then Y = b2 + H W2.
template <class Op>
Tensor2 two_layer_ffn(const Tensor2& x, const FfnWeights& w, std::size_t d_ff, Op op) {
  const std::size_t tokens = x.shape()[0], d_model = x.shape()[1];
  std::vector<float> h(tokens * d_ff);
  detail::sgemm(tokens, d_ff, d_model, 1.0f, x.data(), d_model, w.w1.data(), d_ff, false, 0.0f, h.data(), d_ff);
  const float* b1 = w.b1.size() != 0 ? w.b1.data() : nullptr;
#pragma omp parallel for schedule(static) if (tokens * d_ff > 65536)
  for (std::ptrdiff_t t = 0; t < static_cast<std::ptrdiff_t>(tokens); ++t) {
    float* row = h.data() + static_cast<std::size_t>(t) * d_ff;
    detail::apply(row, b1, row, d_ff, op);
  }
  Tensor2 y = Tensor2::from_shape({tokens, d_model});
  const bool has_b2 = w.b2.size() != 0;
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t c = 0; c < d_model; ++c) y(t, c) = has_b2 ? w.b2(c) : 0.0f;
  detail::sgemm(tokens, d_model, d_ff, 1.0f, h.data(), d_ff, w.w2.data(), d_model, false, 1.0f, y.data(), d_model);
  return y;
}

}  // namespace

Tensor2 ffn_relu(const Tensor2& x, const FfnWeights& w) {
  return two_layer_ffn(x, w, validate_ffn("ffn_relu", x, w), detail::Relu{});
}

Tensor2 ffn_gelu(const Tensor2& x, const FfnWeights& w) {
  return two_layer_ffn(x, w, validate_ffn("ffn_gelu", x, w), detail::Gelu{});
}

Tensor2 ffn_swiglu(const Tensor2& x, const SwigluWeights& w) {
  const std::size_t d_ff = validate_swiglu("ffn_swiglu", x, w);
  const std::size_t tokens = x.shape()[0], d_model = x.shape()[1];
  std::vector<float> gate(tokens * d_ff), up(tokens * d_ff);
  detail::sgemm(tokens, d_ff, d_model, 1.0f, x.data(), d_model, w.w1.data(), d_ff, false, 0.0f, gate.data(), d_ff);
  detail::sgemm(tokens, d_ff, d_model, 1.0f, x.data(), d_model, w.w2.data(), d_ff, false, 0.0f, up.data(), d_ff);
  // h = SiLU(gate) * up, written over gate, one row per iteration.
#pragma omp parallel for schedule(static) if (tokens * d_ff > 65536)
  for (std::ptrdiff_t t = 0; t < static_cast<std::ptrdiff_t>(tokens); ++t) {
    const std::size_t offset = static_cast<std::size_t>(t) * d_ff;
    detail::swiglu_combine(gate.data() + offset, up.data() + offset, gate.data() + offset, d_ff);
  }
  Tensor2 y = Tensor2::from_shape({tokens, d_model});
  detail::sgemm(tokens, d_model, d_ff, 1.0f, gate.data(), d_ff, w.w3.data(), d_model, false, 0.0f, y.data(), d_model);
  return y;
}

}  // namespace tvlab::opt
