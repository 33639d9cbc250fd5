#include "tvlab/ref/moe_backward.hpp"

#include <algorithm>
#include <cmath>

#include "tvlab/core/error.hpp"
#include "tvlab/ref/moe.hpp"

namespace tvlab::ref {
namespace {

double sigmoid(double u) { return 1.0 / (1.0 + std::exp(-u)); }

// Gradients in double while they accumulate.
struct ExpertGrads {
  DTensor2 w1, w2, w3;
};

ExpertGrads zeros_like(const SwigluWeights& w) {
  return {xt::zeros<double>(w.w1.shape()), xt::zeros<double>(w.w2.shape()), xt::zeros<double>(w.w3.shape())};
}

// One expert on token t, forward and backward with delta = weight * dy_t: accumulates the expert's
// gradients and dx_t, and returns Expert(x_t) . dy_t (the gate's gradient, before the weight).
double expert_backward(const SwigluWeights& w, const Tensor2& x, std::size_t t, const Tensor2& dy, double weight, ExpertGrads& g,
                       DTensor2& dx) {
  const std::size_t d_model = x.shape()[1], d_ff = w.w1.shape()[1];
  std::vector<double> h1(d_ff), h2(d_ff), h(d_ff);
  for (std::size_t f = 0; f < d_ff; ++f) {
    double a = 0.0, b = 0.0;
    for (std::size_t c = 0; c < d_model; ++c) a += double(x(t, c)) * w.w1(c, f), b += double(x(t, c)) * w.w2(c, f);
    h1[f] = a, h2[f] = b, h[f] = a * sigmoid(a) * b;
  }
  // o = h W3; dgate = o . dy_t; delta = weight dy_t
  double dgate = 0.0;
  for (std::size_t c = 0; c < d_model; ++c) {
    double o = 0.0;
    for (std::size_t f = 0; f < d_ff; ++f) o += h[f] * w.w3(f, c);
    dgate += o * dy(t, c);
  }
  // dW3 += h^T delta; dh = delta W3^T
  std::vector<double> dh(d_ff, 0.0);
  for (std::size_t f = 0; f < d_ff; ++f)
    for (std::size_t c = 0; c < d_model; ++c) {
      const double delta = weight * dy(t, c);
      g.w3(f, c) += h[f] * delta;
      dh[f] += delta * w.w3(f, c);
    }
  // dh1 = dh h2 SiLU'(h1), dh2 = dh SiLU(h1); dW1 += x^T dh1, dW2 += x^T dh2; dx += dh1 W1^T + dh2 W2^T
  for (std::size_t f = 0; f < d_ff; ++f) {
    const double s = sigmoid(h1[f]);
    const double dh1 = dh[f] * h2[f] * s * (1.0 + h1[f] * (1.0 - s)), dh2 = dh[f] * h1[f] * s;
    for (std::size_t c = 0; c < d_model; ++c) {
      g.w1(c, f) += double(x(t, c)) * dh1;
      g.w2(c, f) += double(x(t, c)) * dh2;
      dx(t, c) += dh1 * w.w1(c, f) + dh2 * w.w2(c, f);
    }
  }
  return dgate;
}

}  // namespace

MoeGrads moe_layer_backward(const Tensor2& x, const MoeWeights& w, const RouterConfig& cfg, const std::vector<float>& bias,
                            const Tensor2& dy) {
  const char* fn = "moe_layer_backward";
  validate_moe(fn, x, w);
  require(cfg.num_experts == w.experts.size(), fn, "cfg.num_experts (", cfg.num_experts, ") is not the number of experts (",
          w.experts.size(), ")");
  const std::size_t tokens = x.shape()[0], d_model = x.shape()[1], num_experts = w.experts.size(), k = cfg.top_k;
  require_dim(fn, "dy", dy, 0, "rows", tokens, "tokens, the rows of x");
  require_dim(fn, "dy", dy, 1, "columns", d_model, "d_model");
  require_finite(fn, "dy", dy);
  const Tensor2 logits = router_logits(x, w);
  const Routing r = route_top_k(logits, cfg, bias);  // k assignments per token, token by token
  const Tensor2 scores = router_scores(logits, cfg);

  DTensor2 dx = xt::zeros<double>({tokens, d_model});
  DTensor2 d_router = xt::zeros<double>({d_model, num_experts});
  std::vector<ExpertGrads> g_experts, g_shared;
  for (const SwigluWeights& e : w.experts) g_experts.push_back(zeros_like(e));
  for (const SwigluWeights& s : w.shared) g_shared.push_back(zeros_like(s));

  for (std::size_t t = 0; t < tokens; ++t) {
    // the experts: each chosen one with delta = g dy_t, the shared ones with delta = dy_t
    std::vector<double> d_gate(k);
    for (std::size_t j = 0; j < k; ++j) {
      const std::size_t a = t * k + j, e = r.expert[a];
      d_gate[j] = expert_backward(w.experts[e], x, t, dy, r.gate[a], g_experts[e], dx);
    }
    for (std::size_t s = 0; s < w.shared.size(); ++s) expert_backward(w.shared[s], x, t, dy, 1.0, g_shared[s], dx);
    // the gates -> the scores s (only the chosen ones move the gates)
    std::vector<double> s(num_experts), ds(num_experts, 0.0);
    for (std::size_t e = 0; e < num_experts; ++e) s[e] = scores(t, e);
    const double rho = cfg.routed_scaling_factor;
    if (cfg.norm_topk_prob) {
      double total = 0.0, weighted = 0.0;
      for (std::size_t j = 0; j < k; ++j) total += s[r.expert[t * k + j]];
      for (std::size_t j = 0; j < k; ++j) weighted += d_gate[j] * s[r.expert[t * k + j]];
      for (std::size_t j = 0; j < k; ++j) ds[r.expert[t * k + j]] = rho * (d_gate[j] / total - weighted / (total * total));
    } else {
      for (std::size_t j = 0; j < k; ++j) ds[r.expert[t * k + j]] = rho * d_gate[j];
    }
    // the scores -> the tempered logits z' -> the logits z (clipping stops the gradient outside (-c, c))
    std::vector<double> dz(num_experts);
    double s_ds = 0.0;
    for (std::size_t e = 0; e < num_experts; ++e) s_ds += s[e] * ds[e];
    for (std::size_t e = 0; e < num_experts; ++e) {
      const double dz_tempered = cfg.score == GateScore::softmax ? s[e] * (ds[e] - s_ds) : ds[e] * s[e] * (1.0 - s[e]);
      const bool clipped = cfg.logit_clip > 0.0f && std::fabs(logits(t, e)) >= cfg.logit_clip;
      dz[e] = clipped ? 0.0 : dz_tempered / cfg.temperature;
    }
    // the router: dW_g += x_t^T dz, dx_t += dz W_g^T
    for (std::size_t c = 0; c < d_model; ++c)
      for (std::size_t e = 0; e < num_experts; ++e) {
        d_router(c, e) += double(x(t, c)) * dz[e];
        dx(t, c) += dz[e] * w.router(c, e);
      }
  }
  MoeGrads grads{xt::cast<float>(dx), xt::cast<float>(d_router), {}, {}};
  for (const ExpertGrads& g : g_experts) grads.experts.push_back({xt::cast<float>(g.w1), xt::cast<float>(g.w2), xt::cast<float>(g.w3)});
  for (const ExpertGrads& g : g_shared) grads.shared.push_back({xt::cast<float>(g.w1), xt::cast<float>(g.w2), xt::cast<float>(g.w3)});
  return grads;
}

}  // namespace tvlab::ref
