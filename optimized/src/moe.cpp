#include "tvlab/opt/moe.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "detail/activation_ops.hpp"
#include "detail/blas.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/opt/moe_dispatch.hpp"

namespace tvlab::opt {
namespace {

constexpr std::size_t kRowBlock = 256;  // rows of one expert's GEMMs: large enough to reuse W well

}  // namespace

Tensor2 moe_experts(const Tensor2& x, const MoeWeights& w, const Routing& r) {
  const char* fn = "moe_experts";
  validate_moe(fn, x, w, /*scan_values=*/false);
  require_finite(fn, "x", x);
  const std::size_t tokens = x.shape()[0], d_model = x.shape()[1], num_experts = w.experts.size(),
                    num_shared = w.shared.size();
  validate_routing(fn, r, tokens, num_experts);
  const ExpertBatches p = group_by_expert(r, num_shared);
  const auto weights_of = [&](std::size_t e) -> const SwigluWeights& {
    return e < num_experts ? w.experts[e] : w.shared[e - num_experts];
  };

  // The (expert, block of rows) pieces of work.
  struct Piece {
    std::size_t expert, begin, end;
  };
  std::vector<Piece> pieces;
  for (std::size_t e = 0; e < num_experts + num_shared; ++e)
    for (std::size_t b = p.first[e]; b < p.first[e + 1]; b += kRowBlock) pieces.push_back({e, b, std::min(b + kRowBlock, p.first[e + 1])});

  // 1 and 2: gather each piece's token rows, then its expert's SwiGLU on them, into y_sorted.
  std::vector<float> y_sorted(p.rows() * d_model);
  {
    detail::SingleThreadedBlas one_thread_each;  // the threads share pieces; each GEMM on one core
#pragma omp parallel
    {
      std::vector<float> rows, gate, up;
#pragma omp for schedule(dynamic, 1)
      for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(pieces.size()); ++i) {
        const Piece& piece = pieces[static_cast<std::size_t>(i)];
        const SwigluWeights& e = weights_of(piece.expert);
        const std::size_t n = piece.end - piece.begin, d_ff = e.w1.shape()[1];
        rows.resize(n * d_model);
        gather_rows(x, p, piece.begin, piece.end, rows.data());
        gate.resize(n * d_ff);
        up.resize(n * d_ff);
        // H = SiLU(X W1) * (X W2), written over the gate; Y = H W3
        detail::sgemm(n, d_ff, d_model, 1.0f, rows.data(), d_model, e.w1.data(), d_ff, false, 0.0f, gate.data(), d_ff);
        detail::sgemm(n, d_ff, d_model, 1.0f, rows.data(), d_model, e.w2.data(), d_ff, false, 0.0f, up.data(), d_ff);
        detail::swiglu_combine(gate.data(), up.data(), gate.data(), n * d_ff);
        detail::sgemm(n, d_model, d_ff, 1.0f, gate.data(), d_ff, e.w3.data(), d_model, false, 0.0f,
                      y_sorted.data() + piece.begin * d_model, d_model);
      }
    }
  }

  // 3: back in token order, weighted by the gates
  bool finite = true;
  Tensor2 y = combine_rows(y_sorted, p, r, num_shared, d_model, finite);
  // x is finite: a non-finite output comes from a weight (or an overflow); the full checks name it
  if (!finite) validate_moe(fn, x, w, /*scan_values=*/true);
  return y;
}

Tensor2 router_logits(const Tensor2& x, const MoeWeights& w) {
  validate_moe("router_logits", x, w, /*scan_values=*/false);
  const std::size_t tokens = x.shape()[0], d_model = x.shape()[1], num_experts = w.experts.size();
  Tensor2 logits = Tensor2::from_shape({tokens, num_experts});
  detail::sgemm(tokens, num_experts, d_model, 1.0f, x.data(), d_model, w.router.data(), num_experts, false, 0.0f,
                logits.data(), num_experts);
  return logits;
}

Tensor2 moe_layer(const Tensor2& x, const MoeWeights& w, const ref::RouterConfig& cfg, const std::vector<float>& bias) {
  validate_moe("moe_layer", x, w, /*scan_values=*/false);
  require(cfg.num_experts == w.experts.size(), "moe_layer", "cfg.num_experts (", cfg.num_experts,
          ") is not the number of experts (", w.experts.size(), ")");
  require_finite("moe_layer", "x", x);
  require_finite("moe_layer", "w.router", w.router);  // d_model x E: small
  return moe_experts(x, w, ref::route_top_k(router_logits(x, w), cfg, bias));
}

}  // namespace tvlab::opt
