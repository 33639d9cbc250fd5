// Host-tensor entry points of chapter 09's CUDA kernels: validate as the reference does, group
// the tokens by expert on the host, upload, call the device entry points (moe_device.hpp and
// cuBLAS through blas.hpp), download. Compiled with or without nvcc.

#include "tvlab/cuda/moe.hpp"

#include <cmath>
#include <cstdint>

#include "tvlab/core/error.hpp"
#include "tvlab/cuda/blas.hpp"
#include "tvlab/cuda/ffn_device.hpp"
#include "tvlab/cuda/moe_device.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "tvlab/opt/moe_dispatch.hpp"

namespace tvlab::cuda {

Tensor2 moe_experts(const Tensor2& x, const MoeWeights& w, const Routing& r) {
  const char* fn = "moe_experts";
  validate_moe(fn, x, w);
  const std::size_t tokens = x.shape()[0], d_model = x.shape()[1], num_experts = w.experts.size(), num_shared = w.shared.size();
  validate_routing(fn, r, tokens, num_experts);
  const opt::ExpertBatches b = opt::group_by_expert(r, num_shared);
  // the rows' tokens, and per token its assignments in order as (row, gate), shared experts last
  std::vector<std::int32_t> row_token(b.token.begin(), b.token.end());
  std::vector<std::int32_t> token_first(tokens + 1, 0), pair_row;
  std::vector<float> pair_gate;
  for (std::size_t t : r.token) ++token_first[t + 1];
  for (std::size_t t = 0; t < tokens; ++t) token_first[t + 1] += token_first[t] + static_cast<std::int32_t>(num_shared);
  pair_row.resize(static_cast<std::size_t>(token_first[tokens]));
  pair_gate.resize(pair_row.size());
  std::vector<std::int32_t> next(token_first.begin(), token_first.end() - 1);
  for (std::size_t a = 0; a < r.size(); ++a) {
    const auto i = static_cast<std::size_t>(next[r.token[a]]++);
    pair_row[i] = static_cast<std::int32_t>(b.row_of[a]), pair_gate[i] = r.gate[a];
  }
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t s = 0; s < num_shared; ++s) {
      const auto i = static_cast<std::size_t>(next[t]++);
      pair_row[i] = static_cast<std::int32_t>(b.first[num_experts + s] + t), pair_gate[i] = 1.0f;
    }
  DeviceBuffer<float> dx(x.data(), x.size()), rows(b.rows() * d_model), out(b.rows() * d_model), y(tokens * d_model);
  DeviceBuffer<std::int32_t> d_token(row_token.data(), row_token.size()), d_first(token_first.data(), token_first.size()),
      d_row(pair_row.data(), pair_row.size());
  DeviceBuffer<float> d_gate(pair_gate.data(), pair_gate.size());
  device::gather_rows(dx.get(), d_token.get(), b.rows(), d_model, rows.get());
  // each expert: H = SiLU(X W1) * (X W2), Y = H W3, over its rows
  for (std::size_t e = 0; e < num_experts + num_shared; ++e) {
    const std::size_t n = b.first[e + 1] - b.first[e];
    if (n == 0) continue;
    const SwigluWeights& we = e < num_experts ? w.experts[e] : w.shared[e - num_experts];
    const std::size_t d_ff = we.w1.shape()[1];
    DeviceBuffer<float> w1(we.w1.data(), we.w1.size()), w2(we.w2.data(), we.w2.size()), w3(we.w3.data(), we.w3.size());
    DeviceBuffer<float> gate(n * d_ff), up(n * d_ff);
    const float* xe = rows.get() + b.first[e] * d_model;
    device::sgemm(n, d_ff, d_model, xe, w1.get(), false, gate.get());
    device::sgemm(n, d_ff, d_model, xe, w2.get(), false, up.get());
    device::swiglu_combine(gate.get(), up.get(), gate.get(), n * d_ff);
    device::sgemm(n, d_model, d_ff, gate.get(), w3.get(), false, out.get() + b.first[e] * d_model);
  }
  device::combine_rows(out.get(), d_first.get(), d_row.get(), d_gate.get(), tokens, d_model, y.get());
  Tensor2 result = Tensor2::from_shape({tokens, d_model});
  y.download(result.data());
  return result;
}

Tensor2 moe_layer(const Tensor2& x, const MoeWeights& w, const ref::RouterConfig& cfg, const std::vector<float>& bias) {
  validate_moe("moe_layer", x, w);
  require(cfg.num_experts == w.experts.size(), "moe_layer", "cfg.num_experts (", cfg.num_experts,
          ") is not the number of experts (", w.experts.size(), ")");
  const std::size_t tokens = x.shape()[0], d_model = x.shape()[1], num_experts = w.experts.size();
  DeviceBuffer<float> dx(x.data(), x.size()), router(w.router.data(), w.router.size()), d_logits(tokens * num_experts);
  device::sgemm(tokens, num_experts, d_model, dx.get(), router.get(), false, d_logits.get());
  Tensor2 logits = Tensor2::from_shape({tokens, num_experts});
  d_logits.download(logits.data());
  return cuda::moe_experts(x, w, cuda::route_top_k(logits, cfg, bias));
}

Routing route_top_k(const Tensor2& logits, const ref::RouterConfig& cfg, const std::vector<float>& bias) {
  const char* fn = "route_top_k";
  ref::validate_router(fn, cfg);
  require(cfg.num_experts <= 1024, fn, "num_experts (", cfg.num_experts, ") is above the kernel's 1024");
  require(cfg.n_group <= 64, fn, "n_group (", cfg.n_group, ") is above the kernel's 64");
  require_nonempty(fn, "logits", logits);
  require_dim(fn, "logits", logits, 1, "columns", cfg.num_experts, "num_experts");
  require_finite_logits(fn, logits);
  require(bias.empty() || bias.size() == cfg.num_experts, fn, "bias has ", bias.size(), " values, expected num_experts (",
          cfg.num_experts, ") or none");
  require_finite(fn, "bias", bias);
  const std::size_t tokens = logits.shape()[0], k = cfg.top_k;
  DeviceBuffer<float> d_logits(logits.data(), logits.size()), d_bias, d_gate(tokens * k);
  if (!bias.empty()) d_bias = DeviceBuffer<float>(bias.data(), bias.size());
  DeviceBuffer<std::int32_t> d_expert(tokens * k);
  device::route_top_k(d_logits.get(), tokens, cfg.num_experts, k, cfg.score == ref::GateScore::sigmoid, cfg.norm_topk_prob,
                      cfg.temperature, cfg.logit_clip, cfg.n_group, cfg.topk_group, cfg.routed_scaling_factor, d_bias.get(),
                      d_expert.get(), d_gate.get());
  std::vector<std::int32_t> expert(tokens * k);
  Routing r;
  r.tokens = tokens, r.num_experts = cfg.num_experts;
  r.gate.resize(tokens * k);
  d_expert.download(expert.data());
  d_gate.download(r.gate.data());
  for (std::size_t i = 0; i < tokens * k; ++i) {
    r.token.push_back(i / k);
    r.expert.push_back(static_cast<std::size_t>(expert[i]));
  }
  return r;
}

}  // namespace tvlab::cuda
