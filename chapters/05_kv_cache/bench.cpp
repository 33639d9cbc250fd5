// The template chapter's benchmarks: every backend of the registry on the same inputs,
// validated against the reference before it is timed, with GB/s against a measured copy of
// the same bytes (the softmax reads and writes each element once). The program's main and the
// registry loop are the benchmark library's (chapters/common/bench_support.hpp): a chapter
// defines tvlab::bench::register_benchmarks() and nothing else.
//
//   build/default/chapters/bench_NN_<topic> --benchmark_counters_tabular=true

#include "../common/bench_support.hpp"
#include "backends.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::bench {
namespace {

void softmax(benchmark::State& state, const kv::Backend& backend) {
  const auto rows = static_cast<std::size_t>(state.range(0)), cols = static_cast<std::size_t>(state.range(1));
  Rng rng(1);
  const Tensor2 x = rng.normal_matrix(rows, cols, 0.0, 3.0);
  // A row reduction of length cols in float against the reference: rtol = reduction_rtol(cols).
  if (!validate(state, backend.softmax(x), reference_backend(kv::backends()).softmax(x), {2e-6, reduction_rtol(cols)}))
    return;
  for (auto _ : state) benchmark::DoNotOptimize(backend.softmax(x));
  set_bytes(state, 2.0 * static_cast<double>(x.size() * sizeof(float)));
}

}  // namespace

void register_benchmarks() {
  add_stream_scale({4 << 20});
  // One benchmark per backend providing the function: ref_softmax, opt_softmax, cuda_softmax...
  add_backends(kv::backends(), &kv::Backend::softmax, "softmax", softmax,
               [](benchmark::internal::Benchmark* b, const kv::Backend&) { b->Args({1024, 1024})->Unit(benchmark::kMicrosecond); });
}

}  // namespace tvlab::bench
