// Chapter 09's benchmarks: an MoE layer with d_model = 1024 and d_ff = 2816 per expert, E = 8 or
// 64 experts, k = 1, 2 or 8 of them per token, 4096 tokens (the reference loops: 64 tokens, which
// takes them seconds already; GFLOP/s does not depend on the count), balanced routing (a random
// router) and skewed routing (a selection bias favouring the low experts, b_e = -0.1 ln(1 + e): the
// load of the busiest expert is reported against the mean). Every backend of the registry is
// validated against the reference before it is timed. GFLOP/s counts the active expert FLOPs,
// 3 matrices x 2 d_model d_ff per assignment, against OpenBLAS SGEMM measured in the same run; the
// dense SwiGLU FFN with the same active parameters (d_ff = k x 2816) is the layer an MoE replaces;
// `moe_route_and_permute` times what the layer adds around the experts' products (the router's
// logits, the top-k, grouping the tokens by expert and gathering their rows).
//
//   build/default/chapters/bench_09_mixture_of_experts --benchmark_counters_tabular=true

#include <algorithm>
#include <cmath>
#include <map>

#include "../common/bench_support.hpp"
#include "backends.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/opt/ffn.hpp"
#include "tvlab/opt/moe.hpp"
#include "tvlab/opt/moe_dispatch.hpp"
#include "tvlab/ref/moe.hpp"

namespace tvlab::bench {
namespace {

constexpr std::size_t kModel = 1024, kHidden = 2816, kTokens = 4096, kReferenceTokens = 64;

// The layer of E experts (made once per E: 64 experts are 2.2 GB).
const MoeWeights& weights(std::size_t num_experts) {
  static std::map<std::size_t, MoeWeights> held;
  auto it = held.find(num_experts);
  if (it == held.end()) {
    Rng rng(95 + num_experts);
    MoeWeights w;
    w.router = rng.normal_matrix(kModel, num_experts, 0.0, 1.0 / std::sqrt(double(kModel)));
    for (std::size_t e = 0; e < num_experts; ++e)
      w.experts.push_back({rng.normal_matrix(kModel, kHidden, 0.0, 0.02), rng.normal_matrix(kModel, kHidden, 0.0, 0.02),
                           rng.normal_matrix(kHidden, kModel, 0.0, 0.02)});
    it = held.emplace(num_experts, std::move(w)).first;
  }
  return it->second;
}

const Tensor2& tokens(std::size_t count) {
  static std::map<std::size_t, Tensor2> held;
  auto it = held.find(count);
  if (it == held.end()) it = held.emplace(count, Rng(96).normal_matrix(count, kModel)).first;
  return it->second;
}

ref::RouterConfig router(std::size_t num_experts, std::size_t k) {
  ref::RouterConfig cfg;
  cfg.num_experts = num_experts;
  cfg.top_k = k;
  return cfg;
}

// Skewed routing: a selection bias -0.1 ln(1 + e), which favours the low-numbered experts.
std::vector<float> skew_bias(std::size_t num_experts, bool skewed) {
  std::vector<float> b;
  if (skewed)
    for (std::size_t e = 0; e < num_experts; ++e) b.push_back(static_cast<float>(-0.1 * std::log(1.0 + e)));
  return b;
}

// args: E, k, skewed (0 or 1).
void moe_layer(benchmark::State& state, const moe::Backend& backend) {
  const auto num_experts = static_cast<std::size_t>(state.range(0)), k = static_cast<std::size_t>(state.range(1));
  const bool skewed = state.range(2) != 0;
  const std::size_t count = backend.kind == BackendKind::reference ? kReferenceTokens : kTokens;
  const MoeWeights& w = weights(num_experts);
  const Tensor2& x = tokens(count);
  const ref::RouterConfig cfg = router(num_experts, k);
  const std::vector<float> bias = skew_bias(num_experts, skewed);
  // validated on the reference's token count (the reference at 4096 tokens would take minutes)
  const Tensor2& small = tokens(kReferenceTokens);
  if (!validate(state, backend.moe_layer(small, w, cfg, bias), reference_backend(moe::backends()).moe_layer(small, w, cfg, bias),
                {1e-5, reduction_rtol(kHidden)}))
    return;
  const Routing r = ref::route_top_k(ref::router_logits(x, w), cfg, bias);
  const std::vector<std::size_t> load = expert_load(r);
  for (auto _ : state) benchmark::DoNotOptimize(backend.moe_layer(x, w, cfg, bias));
  state.counters["GFLOP/s"] = gflops(6.0 * static_cast<double>(count * k * kModel * kHidden));
  state.counters["max/mean load"] =
      static_cast<double>(*std::max_element(load.begin(), load.end())) * static_cast<double>(num_experts) / static_cast<double>(r.size());
}

// The dense SwiGLU FFN with the MoE's active parameters: d_ff = k x 2816, on the same tokens.
void dense_ffn(benchmark::State& state) {
  const auto k = static_cast<std::size_t>(state.range(0));
  Rng rng(97);
  const SwigluWeights w{rng.normal_matrix(kModel, k * kHidden, 0.0, 0.02), rng.normal_matrix(kModel, k * kHidden, 0.0, 0.02),
                        rng.normal_matrix(k * kHidden, kModel, 0.0, 0.02)};
  const Tensor2& x = tokens(kTokens);
  for (auto _ : state) benchmark::DoNotOptimize(opt::ffn_swiglu(x, w));
  state.counters["GFLOP/s"] = gflops(6.0 * static_cast<double>(kTokens * k * kModel * kHidden));
}

// What the optimized layer does besides the experts' products: logits (one SGEMM), the top-k,
// grouping by expert, gathering the rows.
void route_and_permute(benchmark::State& state) {
  const auto num_experts = static_cast<std::size_t>(state.range(0)), k = static_cast<std::size_t>(state.range(1));
  const MoeWeights& w = weights(num_experts);
  const Tensor2& x = tokens(kTokens);
  const ref::RouterConfig cfg = router(num_experts, k);
  std::vector<float> rows;
  for (auto _ : state) {
    const Routing r = ref::route_top_k(opt::router_logits(x, w), cfg);
    const opt::ExpertBatches b = opt::group_by_expert(r, 0);
    rows.resize(b.rows() * kModel);
    opt::gather_rows(x, b, 0, b.rows(), rows.data());
    benchmark::DoNotOptimize(rows.data());
  }
}

}  // namespace

void register_benchmarks() {
  add_openblas_sgemm({1024, 2048});
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {{8, 1}, {8, 2}, {64, 1}, {64, 2}, {64, 8}};
  add_backends(moe::backends(), &moe::Backend::moe_layer, "moe_layer", moe_layer,
               [shapes](benchmark::internal::Benchmark* b, const moe::Backend&) {
                 for (const auto& [e, k] : shapes)
                   for (std::int64_t skewed : {0, 1}) b->Args({e, k, skewed});
                 b->ArgNames({"E", "k", "skewed"})->Unit(benchmark::kMillisecond);
               });
  benchmark::RegisterBenchmark("dense_swiglu_ffn", dense_ffn)
      ->Args({1})->Args({2})->Args({8})->ArgNames({"k"})->Unit(benchmark::kMillisecond)->UseRealTime();
  auto* route = benchmark::RegisterBenchmark("moe_route_and_permute", route_and_permute);
  for (const auto& [e, k] : shapes) route->Args({e, k});
  route->ArgNames({"E", "k"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

}  // namespace tvlab::bench
