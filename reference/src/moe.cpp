#include "tvlab/ref/moe.hpp"

#include <cmath>

#include "tvlab/core/error.hpp"

namespace tvlab::ref {
namespace {

// One SwiGLU expert on one token, in double: out = (SiLU(x W1) * (x W2)) W3.
void expert_on_token(const SwigluWeights& w, const float* x, std::size_t d_model, std::vector<double>& out) {
  const std::size_t d_ff = w.w1.shape()[1];
  std::vector<double> h(d_ff);
  for (std::size_t f = 0; f < d_ff; ++f) {
    double gate = 0.0, up = 0.0;
    for (std::size_t c = 0; c < d_model; ++c) {
      gate += static_cast<double>(x[c]) * w.w1(c, f);
      up += static_cast<double>(x[c]) * w.w2(c, f);
    }
    h[f] = gate / (1.0 + std::exp(-gate)) * up;  // SiLU(gate) * up
  }
  out.assign(d_model, 0.0);
  for (std::size_t c = 0; c < d_model; ++c)
    for (std::size_t f = 0; f < d_ff; ++f) out[c] += h[f] * w.w3(f, c);
}

}  // namespace

Tensor2 moe_experts(const Tensor2& x, const MoeWeights& w, const Routing& r) {
  validate_moe("moe_experts", x, w);
  const std::size_t tokens = x.shape()[0], d_model = x.shape()[1];
  validate_routing("moe_experts", r, tokens, w.experts.size());
  DTensor2 y = xt::zeros<double>({tokens, d_model});
  std::vector<double> out;
  // y_t += g_a Expert_{e_a}(x_t) for every assignment a, in the routing's order
  for (std::size_t a = 0; a < r.size(); ++a) {
    const std::size_t t = r.token[a];
    expert_on_token(w.experts[r.expert[a]], &x(t, 0), d_model, out);
    for (std::size_t c = 0; c < d_model; ++c) y(t, c) += static_cast<double>(r.gate[a]) * out[c];
  }
  // y_t += Shared_s(x_t) for every token and shared expert
  for (std::size_t t = 0; t < tokens; ++t)
    for (const SwigluWeights& s : w.shared) {
      expert_on_token(s, &x(t, 0), d_model, out);
      for (std::size_t c = 0; c < d_model; ++c) y(t, c) += out[c];
    }
  return xt::cast<float>(y);
}

Tensor2 router_logits(const Tensor2& x, const MoeWeights& w) {
  validate_moe("router_logits", x, w);
  const std::size_t tokens = x.shape()[0], d_model = x.shape()[1], num_experts = w.experts.size();
  Tensor2 logits = Tensor2::from_shape({tokens, num_experts});
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t e = 0; e < num_experts; ++e) {
      double z = 0.0;
      for (std::size_t c = 0; c < d_model; ++c) z += static_cast<double>(x(t, c)) * w.router(c, e);
      logits(t, e) = static_cast<float>(z);
    }
  return logits;
}

Tensor2 moe_layer(const Tensor2& x, const MoeWeights& w, const RouterConfig& cfg, const std::vector<float>& bias) {
  validate_moe("moe_layer", x, w);
  require(cfg.num_experts == w.experts.size(), "moe_layer", "cfg.num_experts (", cfg.num_experts, ") is not the number of experts (",
          w.experts.size(), ")");
  return moe_experts(x, w, route_top_k(router_logits(x, w), cfg, bias));
}

}  // namespace tvlab::ref
