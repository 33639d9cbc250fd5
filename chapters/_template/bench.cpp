// The template chapter's benchmarks: every backend of the registry on the same inputs,
// validated against the reference before it is timed, with GB/s against a measured copy of
// the same bytes (the softmax reads and writes each element once).

#include <benchmark/benchmark.h>

#include "../common/bench_support.hpp"
#include "backends.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/opt/blas_kernel.hpp"

namespace {

using namespace tvlab;

void BM_softmax(benchmark::State& state, const example::Backend& backend) {
  const auto rows = static_cast<std::size_t>(state.range(0)), cols = static_cast<std::size_t>(state.range(1));
  Rng rng(1);
  const Tensor2 x = rng.normal_matrix(rows, cols, 0.0, 3.0);
  if (!bench::validate(state, backend.softmax(x), reference_backend(example::backends()).softmax(x), 1e-6)) return;
  for (auto _ : state) benchmark::DoNotOptimize(backend.softmax(x));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(2 * x.size() * sizeof(float)));
}

}  // namespace

BENCHMARK(tvlab::bench::BM_stream_scale)->Arg(4 << 20)->UseRealTime()->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) {
  tvlab::opt::use_the_best_blas_kernel(argv);
  benchmark::Initialize(&argc, argv);
  for (const auto& b : tvlab::example::backends()) {
    // CUDA kernels without a device and unsolved exercises are not timed.
    if (!b.softmax || tvlab::unavailable_reason(b.caps) || b.kind == tvlab::BackendKind::student) continue;
    benchmark::RegisterBenchmark((b.name + "_softmax").c_str(), BM_softmax, b)
        ->Args({1024, 1024})->UseRealTime()->Unit(benchmark::kMicrosecond);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
