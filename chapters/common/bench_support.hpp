#pragma once
/// @file
/// What every chapter's benchmark program shares, so that a chapter's `bench.cpp` holds only its
/// own measurements:
///
/// - the program itself: `main` lives in `bench_main.cpp` and calls the chapter's
///   `tvlab::bench::register_benchmarks()`, the one function a `bench.cpp` must define;
/// - the machine's measured limits: OpenBLAS SGEMM for compute, memory copies for bandwidth;
/// - the registry loop: one benchmark `<backend>_<function>` per entry of the chapter's registry
///   that provides the function, entries that cannot run here listed with the reason;
/// - validation before timing: a result that disagrees with the reference is reported as an
///   error, never as a time (an optimized kernel that is wrong is not fast).
///
/// The peak extra heap of a call is in `bench_memory.hpp`, attention's checks in
/// `bench_attention.hpp`, CUDA timing in `bench_cuda.hpp`.

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "backend.hpp"
#include "tvlab/core/compare.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::bench {

/// Defined by each chapter's `bench.cpp`: registers the chapter's benchmarks (the baselines it
/// compares with, then its functions). Called by the library's `main` after Google Benchmark has
/// read its options and before it runs.
void register_benchmarks();

// ------------------------------------------------------------------ the machine's limits

/// OpenBLAS SGEMM n x n x n: the compute limit that GFLOP/s figures are compared with.
void BM_openblas_sgemm(benchmark::State& state);
void BM_openblas_sgemv(benchmark::State& state);
/// memcpy of range(0) bytes: the memory-bandwidth limit for GB/s figures (read + write counted).
void BM_memcpy(benchmark::State& state);
/// y_i = s x_i over range(0) bytes of x into a second buffer, threaded and vectorised: the limit
/// for a kernel that reads one tensor and writes another (read + write counted). Unlike glibc's
/// memcpy, whose non-temporal stores bypass the cache, it sees the last-level cache when the
/// data fits there.
void BM_stream_scale(benchmark::State& state);

/// x_i <- s x_i in place over range(0) bytes, threaded like BM_stream_scale: the limit for a kernel
/// that reads a tensor and writes it back (read + write counted), such as RoPE applied in place.
void BM_stream_scale_inplace(benchmark::State& state);

/// Registers `openblas_sgemv/<rows>/<cols>` for each shape: float W [rows, cols] times a vector,
/// GB/s of W read.
void add_openblas_sgemv(const std::vector<std::pair<std::int64_t, std::int64_t>>& shapes);

/// Registers `openblas_sgemm/<n>` for each size n.
void add_openblas_sgemm(const std::vector<std::int64_t>& sizes);
/// Registers `memcpy/<bytes>` for each size.
void add_memcpy(const std::vector<std::int64_t>& bytes);
/// Registers `stream_scale/<bytes>` for each size.
void add_stream_scale(const std::vector<std::int64_t>& bytes);
/// Registers `stream_scale_inplace/<bytes>` for each size.
void add_stream_scale_inplace(const std::vector<std::int64_t>& bytes);

// ------------------------------------------------------------------ validation

/// Checks `actual` against `reference` element by element, as the tests do: an element passes
/// when |x - ref| <= atol + rtol |ref|. On failure the benchmark reports an error naming the
/// first element outside the tolerance (by coordinates) and how many there are, and returns false:
/// the caller returns without timing.
bool validate_values(benchmark::State& state, const std::vector<std::size_t>& actual_shape, const float* actual,
                     const std::vector<std::size_t>& reference_shape, const float* reference, Tolerance tol);

template <class A, class R>
bool validate(benchmark::State& state, const A& actual, const R& reference, Tolerance tol) {
  return validate_values(state, shape_of(actual), actual.data(), shape_of(reference), reference.data(), tol);
}

// ------------------------------------------------------------------ counters

/// GFLOP/s counter (Google Benchmark divides by the measured time).
inline benchmark::Counter gflops(double flops_per_iteration) {
  return benchmark::Counter(flops_per_iteration / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
/// TFLOP/s counter, for the CUDA benchmarks.
inline benchmark::Counter tflops(double flops_per_iteration) { return gflops(flops_per_iteration / 1e3); }
/// Bytes moved per iteration, for Google Benchmark's bytes_per_second.
inline void set_bytes(benchmark::State& state, double bytes_per_iteration) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes_per_iteration));
}

// ------------------------------------------------------------------ the registry

/// Records that benchmark `name` is not timed in this run and why ("no CUDA device: ..."); the
/// program prints the list as the context line `not_timed`.
void note_not_timed(const std::string& name, const std::string& reason);
/// "cuda_attention, cuda_softmax: no CUDA device ..." (one group per reason), or "" when every
/// registered benchmark runs.
std::string not_timed_summary();

/// Runs a benchmark's body, turning an exception into the benchmark's error: an unsolved
/// exercise (`tvlab::NotImplemented`, "not implemented: exercise 04.2 ...") or a refused input.
void run_guarded(benchmark::State& state, const std::function<void()>& body);

/// Adds a registered benchmark's arguments (`Args`, `ArgNames`, `Iterations`, ...).
using Shapes = std::function<void(benchmark::internal::Benchmark*)>;

/// Registers `<backend>_<function>` for every entry of the registry `all` that provides member
/// `f`, in the registry's order: wall-clock time (the optimized versions use threads) in
/// milliseconds; each runs `body(state, backend)` under `run_guarded`, with the arguments
/// `shapes_of(benchmark, backend)` adds. Entries that cannot run on this machine
/// (`unavailable_reason`) are noted as not timed instead. A student's entry is registered: until
/// the exercise is solved it reports NotImplemented's message in place of a time.
template <class Backend, class Member, class Body, class ShapesOf>
void add_backends(const std::vector<Backend>& all, Member Backend::*f, const std::string& function, Body body,
                  ShapesOf shapes_of) {
  for (const Backend& backend : all) {
    if (!(backend.*f)) continue;
    const std::string name = backend.name + "_" + function;
    if (const auto reason = unavailable_reason(backend.caps)) {
      note_not_timed(name, *reason);
      continue;
    }
    auto* b = benchmark::RegisterBenchmark(name.c_str(), [body, backend](benchmark::State& state) {
      run_guarded(state, [&] { body(state, backend); });
    });
    b->UseRealTime()->Unit(benchmark::kMillisecond);
    shapes_of(b, backend);
  }
}

/// Registers a benchmark that is not a registry function (an in-place variant, a vendor library's
/// comparison), under `run_guarded`, wall-clock in milliseconds.
void add_benchmark(const std::string& name, const std::function<void(benchmark::State&)>& body, const Shapes& shapes);

}  // namespace tvlab::bench
