#include "tvlab/opt/moe_backward.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "detail/blas.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/opt/moe.hpp"
#include "tvlab/opt/moe_dispatch.hpp"

namespace tvlab::opt {
namespace {

// C[m, n] (+)= A^T B with A stored [k, m] and B [k, n], row-major.
void sgemm_at_b(std::size_t m, std::size_t n, std::size_t k, const float* a, const float* b, float beta, float* c) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, a,
              static_cast<int>(m), b, static_cast<int>(n), beta, c, static_cast<int>(n));
}

float sigmoid(float u) { return 1.0f / (1.0f + std::exp(-u)); }

}  // namespace

ref::MoeGrads moe_layer_backward(const Tensor2& x, const MoeWeights& w, const ref::RouterConfig& cfg, const std::vector<float>& bias,
                                 const Tensor2& dy) {
  const char* fn = "moe_layer_backward";
  validate_moe(fn, x, w, /*scan_values=*/false);
  require(cfg.num_experts == w.experts.size(), fn, "cfg.num_experts (", cfg.num_experts, ") is not the number of experts (",
          w.experts.size(), ")");
  const std::size_t tokens = x.shape()[0], d_model = x.shape()[1], num_experts = w.experts.size(), num_shared = w.shared.size(),
                    k = cfg.top_k;
  require_dim(fn, "dy", dy, 0, "rows", tokens, "tokens, the rows of x");
  require_dim(fn, "dy", dy, 1, "columns", d_model, "d_model");
  require_finite(fn, "x", x);
  require_finite(fn, "w.router", w.router);
  require_finite(fn, "dy", dy);
  const Tensor2 logits = router_logits(x, w);
  const Routing r = ref::route_top_k(logits, cfg, bias);
  const Tensor2 scores = ref::router_scores(logits, cfg);
  const ExpertBatches b = group_by_expert(r, num_shared);
  const auto weights_of = [&](std::size_t e) -> const SwigluWeights& { return e < num_experts ? w.experts[e] : w.shared[e - num_experts]; };
  // the gate of each grouped row (1 for the shared experts) and which assignment it came from
  std::vector<float> row_gate(b.rows(), 1.0f);
  std::vector<std::size_t> row_assignment(b.rows(), r.size());
  for (std::size_t a = 0; a < r.size(); ++a) row_gate[b.row_of[a]] = r.gate[a], row_assignment[b.row_of[a]] = a;

  ref::MoeGrads grads;
  for (std::size_t e = 0; e < num_experts + num_shared; ++e) {
    const SwigluWeights& we = weights_of(e);
    // written whole by the expert's SGEMMs (beta 0); zeroed below only for an expert no token visits
    ref::SwigluGrads z{Tensor2::from_shape(we.w1.shape()), Tensor2::from_shape(we.w2.shape()), Tensor2::from_shape(we.w3.shape())};
    (e < num_experts ? grads.experts : grads.shared).push_back(std::move(z));
  }
  std::vector<float> dx_rows(b.rows() * d_model), d_gate(r.size(), 0.0f);
  // the experts, largest first, each whole on one thread
  std::vector<std::size_t> order(num_experts + num_shared);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t p, std::size_t q) {
    return b.first[p + 1] - b.first[p] > b.first[q + 1] - b.first[q];
  });
  {
    detail::SingleThreadedBlas one_thread_each;
#pragma omp parallel
    {
      std::vector<float> xr, delta, h1, h2, h, o, dh;
#pragma omp for schedule(dynamic, 1)
      for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(order.size()); ++i) {
        const std::size_t e = order[static_cast<std::size_t>(i)], begin = b.first[e], n = b.first[e + 1] - begin;
        ref::SwigluGrads& ge = e < num_experts ? grads.experts[e] : grads.shared[e - num_experts];
        if (n == 0) {  // no token chose this expert: no gradient
          ge.w1.fill(0.0f), ge.w2.fill(0.0f), ge.w3.fill(0.0f);
          continue;
        }
        const SwigluWeights& we = weights_of(e);
        const std::size_t d_ff = we.w1.shape()[1];
        xr.resize(n * d_model), delta.resize(n * d_model);
        gather_rows(x, b, begin, begin + n, xr.data());
        // Delta = diag(g) dY, row by row
        for (std::size_t j = 0; j < n; ++j)
          for (std::size_t c = 0; c < d_model; ++c) delta[j * d_model + c] = row_gate[begin + j] * dy(b.token[begin + j], c);
        // the forward pass again: H1, H2, H = SiLU(H1) H2, O = H W3
        h1.resize(n * d_ff), h2.resize(n * d_ff), h.resize(n * d_ff), o.resize(n * d_model), dh.resize(n * d_ff);
        detail::sgemm(n, d_ff, d_model, 1.0f, xr.data(), d_model, we.w1.data(), d_ff, false, 0.0f, h1.data(), d_ff);
        detail::sgemm(n, d_ff, d_model, 1.0f, xr.data(), d_model, we.w2.data(), d_ff, false, 0.0f, h2.data(), d_ff);
        for (std::size_t q = 0; q < n * d_ff; ++q) h[q] = h1[q] * sigmoid(h1[q]) * h2[q];
        detail::sgemm(n, d_model, d_ff, 1.0f, h.data(), d_ff, we.w3.data(), d_model, false, 0.0f, o.data(), d_model);
        // the gates' gradient: O_row . dy_t for the routed rows
        for (std::size_t j = 0; j < n; ++j) {
          const std::size_t a = row_assignment[begin + j];
          if (a == r.size()) continue;
          float dot = 0.0f;
          for (std::size_t c = 0; c < d_model; ++c) dot += o[j * d_model + c] * dy(b.token[begin + j], c);
          d_gate[a] = dot;
        }
        // dW3 = H^T Delta; dH = Delta W3^T
        sgemm_at_b(d_ff, d_model, n, h.data(), delta.data(), 0.0f, ge.w3.data());
        detail::sgemm(n, d_ff, d_model, 1.0f, delta.data(), d_model, we.w3.data(), d_model, true, 0.0f, dh.data(), d_ff);
        // dH1 = dH H2 SiLU'(H1) (into h1), dH2 = dH SiLU(H1) (into h2)
        for (std::size_t q = 0; q < n * d_ff; ++q) {
          const float s = sigmoid(h1[q]);
          const float dh1 = dh[q] * h2[q] * s * (1.0f + h1[q] * (1.0f - s)), dh2 = dh[q] * h1[q] * s;
          h1[q] = dh1, h2[q] = dh2;
        }
        // dW1 = X^T dH1, dW2 = X^T dH2; dX = dH1 W1^T + dH2 W2^T
        sgemm_at_b(d_model, d_ff, n, xr.data(), h1.data(), 0.0f, ge.w1.data());
        sgemm_at_b(d_model, d_ff, n, xr.data(), h2.data(), 0.0f, ge.w2.data());
        float* dxr = dx_rows.data() + begin * d_model;
        detail::sgemm(n, d_model, d_ff, 1.0f, h1.data(), d_ff, we.w1.data(), d_ff, true, 0.0f, dxr, d_model);
        detail::sgemm(n, d_model, d_ff, 1.0f, h2.data(), d_ff, we.w2.data(), d_ff, true, 1.0f, dxr, d_model);
      }
    }
  }
  // dx from the experts: each token's rows added (gate 1: Delta already carries g)
  Routing unit = r;
  std::fill(unit.gate.begin(), unit.gate.end(), 1.0f);
  bool finite = true;
  Tensor2 dx = combine_rows(dx_rows, b, unit, num_shared, d_model, finite);
  // the router: dgate -> ds -> dz per token, then dW_g = X^T dZ and dx += dZ W_g^T
  Tensor2 dz = xt::zeros<float>({tokens, num_experts});
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t ti = 0; ti < static_cast<std::ptrdiff_t>(tokens); ++ti) {
    const std::size_t t = static_cast<std::size_t>(ti);
    std::vector<double> ds(num_experts, 0.0);
    const double rho = cfg.routed_scaling_factor;
    double total = 0.0, weighted = 0.0;
    for (std::size_t j = 0; j < k; ++j) total += scores(t, r.expert[t * k + j]), weighted += d_gate[t * k + j] * scores(t, r.expert[t * k + j]);
    for (std::size_t j = 0; j < k; ++j)
      ds[r.expert[t * k + j]] = cfg.norm_topk_prob ? rho * (d_gate[t * k + j] / total - weighted / (total * total)) : rho * d_gate[t * k + j];
    double s_ds = 0.0;
    for (std::size_t e = 0; e < num_experts; ++e) s_ds += scores(t, e) * ds[e];
    for (std::size_t e = 0; e < num_experts; ++e) {
      const double s = scores(t, e);
      const double tempered = cfg.score == ref::GateScore::softmax ? s * (ds[e] - s_ds) : ds[e] * s * (1.0 - s);
      const bool clipped = cfg.logit_clip > 0.0f && std::fabs(logits(t, e)) >= cfg.logit_clip;
      dz(t, e) = clipped ? 0.0f : static_cast<float>(tempered / cfg.temperature);
    }
  }
  grads.router = Tensor2::from_shape({d_model, num_experts});
  sgemm_at_b(d_model, num_experts, tokens, x.data(), dz.data(), 0.0f, grads.router.data());
  detail::sgemm(tokens, d_model, num_experts, 1.0f, dz.data(), num_experts, w.router.data(), num_experts, true, 1.0f, dx.data(),
                d_model);
  grads.x = std::move(dx);
  // a non-finite gradient comes from a weight the scan skipped: the reference's checks name it
  if (!finite || !std::all_of(grads.x.begin(), grads.x.end(), [](float v) { return std::isfinite(v); }))
    validate_moe(fn, x, w, /*scan_values=*/true);
  return grads;
}

}  // namespace tvlab::opt
