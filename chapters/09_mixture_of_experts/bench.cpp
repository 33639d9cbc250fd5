// Chapter 09's benchmarks: the experts' part of an MoE layer for every backend of the registry,
// validated against the reference before it is timed, with GFLOP/s of the active expert FLOPs
// (3 matrices of d_model x d_ff, 2 FLOPs per multiply-add, per assignment) against OpenBLAS SGEMM
// measured in the same run.
//
//   build/default/chapters/bench_09_mixture_of_experts --benchmark_counters_tabular=true

#include <cmath>

#include "../common/bench_support.hpp"
#include "backends.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/moe.hpp"

namespace tvlab::bench {
namespace {

// args: tokens, d_model, d_ff, E, k.
void moe_experts(benchmark::State& state, const moe::Backend& backend) {
  const auto tokens = static_cast<std::size_t>(state.range(0)), d_model = static_cast<std::size_t>(state.range(1)),
             d_ff = static_cast<std::size_t>(state.range(2)), num_experts = static_cast<std::size_t>(state.range(3)),
             k = static_cast<std::size_t>(state.range(4));
  Rng rng(95);
  MoeWeights w;
  w.router = rng.normal_matrix(d_model, num_experts, 0.0, 1.0 / std::sqrt(double(d_model)));
  for (std::size_t e = 0; e < num_experts; ++e)
    w.experts.push_back({rng.normal_matrix(d_model, d_ff, 0.0, 0.02), rng.normal_matrix(d_model, d_ff, 0.0, 0.02),
                         rng.normal_matrix(d_ff, d_model, 0.0, 0.02)});
  const Tensor2 x = rng.normal_matrix(tokens, d_model);
  ref::RouterConfig cfg;
  cfg.num_experts = num_experts;
  cfg.top_k = k;
  const Routing r = ref::route_top_k(ref::router_logits(x, w), cfg);
  // sums of d_ff products in float against the reference's double: rtol of a reduction of length d_ff
  if (!validate(state, backend.moe_experts(x, w, r), reference_backend(moe::backends()).moe_experts(x, w, r),
                {1e-5, reduction_rtol(d_ff)}))
    return;
  for (auto _ : state) benchmark::DoNotOptimize(backend.moe_experts(x, w, r));
  state.counters["GFLOP/s"] = gflops(6.0 * static_cast<double>(r.size() * d_model * d_ff));
}

}  // namespace

void register_benchmarks() {
  add_openblas_sgemm({1024, 2048});
  add_backends(moe::backends(), &moe::Backend::moe_experts, "moe_experts", moe_experts,
               [](benchmark::internal::Benchmark* b, const moe::Backend& backend) {
                 // the reference loops take seconds at this size: a smaller batch for them
                 const std::int64_t tokens = backend.kind == BackendKind::reference ? 64 : 1024;
                 b->Args({tokens, 1024, 2816, 8, 2})->ArgNames({"tokens", "d_model", "d_ff", "E", "k"})->Unit(benchmark::kMillisecond);
               });
}

}  // namespace tvlab::bench
