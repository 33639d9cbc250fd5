#pragma once
// What every chapter's bench.cpp shares: the machine's measured limits (OpenBLAS SGEMM for
// compute, a large memcpy for memory bandwidth), validation before timing, and CUDA timing.

#include <benchmark/benchmark.h>

#include <cmath>
#include <string>

#include "tvlab/core/compare.hpp"

namespace tvlab::bench {

/// OpenBLAS SGEMM n x n x n: the compute limit that GFLOP/s figures are compared with.
void BM_openblas_sgemm(benchmark::State& state);
/// memcpy of range(0) bytes: the memory-bandwidth limit for GB/s figures (read + write counted).
void BM_memcpy(benchmark::State& state);
/// y_i = s x_i over range(0) bytes of x into a second buffer, threaded and vectorised: the limit
/// for a kernel that reads one tensor and writes another (read + write counted). Unlike glibc's
/// memcpy, whose non-temporal stores bypass the cache, it sees the last-level cache when the
/// data fits there.
void BM_stream_scale(benchmark::State& state);

/// Validates a result against the reference before timing; on failure the benchmark reports
/// an error instead of a time (an optimized kernel that is wrong is not fast).
/// An element passes when |x - ref| <= atol + rtol |ref|, as in the tests.
template <class A, class R>
bool validate(benchmark::State& state, const A& actual, const R& reference, double atol, double rtol = 0.0) {
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double x = actual.data()[i], r = reference.data()[i];
    if (!(std::abs(x - r) <= atol + rtol * std::abs(r))) {
      state.SkipWithError(("element " + std::to_string(i) + " is " + std::to_string(x) + ", the reference " +
                           std::to_string(r)).c_str());
      return false;
    }
  }
  return true;
}

/// GFLOP/s counter (Google Benchmark divides by the measured time).
inline benchmark::Counter gflops(double flops_per_iteration) {
  return benchmark::Counter(flops_per_iteration / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace tvlab::bench
