// The `main` of every chapter's benchmark program (bench_NN_<topic>): the chapter contributes
// its benchmarks through `tvlab::bench::register_benchmarks()`.

#include <benchmark/benchmark.h>

#include "bench_support.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "tvlab/opt/blas_kernel.hpp"

int main(int argc, char** argv) {
  tvlab::opt::use_the_best_blas_kernel(argv);  // timings against a fallback kernel would mislead
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  tvlab::bench::register_benchmarks();
  // Printed above the results (and in --benchmark_format=json's "context"): what ran where.
  benchmark::AddCustomContext("cuda", tvlab::cuda::device_description());
  benchmark::AddCustomContext("openblas_kernel", tvlab::opt::blas_core_name());
  if (const std::string skipped = tvlab::bench::not_timed_summary(); !skipped.empty())
    benchmark::AddCustomContext("not_timed", skipped);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
