#pragma once
/// @file
/// Peak extra heap of one call, for the chapters about memory (chapter 00's score matrix,
/// chapter 04's tiles). The benchmark library replaces the global `operator new` and
/// `operator delete` of every benchmark program with counting versions (bench_memory.cpp), so a
/// benchmark can report the peak number of bytes a call allocated beyond what it returns.
/// Allocations that bypass `operator new` are not counted: OpenBLAS's work buffers (mmap'ed by the
/// library; they do not grow with the problem) and CUDA device memory.

#include <benchmark/benchmark.h>

#include <functional>

namespace tvlab::bench {

/// The peak number of heap bytes live during `call` beyond those live before it.
double peak_extra_heap_bytes(const std::function<void()>& call);

/// Runs `call` once (outside the timing loop) and reports the peak heap it allocated beyond its
/// result, `output_bytes` (the tensors it returns), as the counter `extra_MiB`.
template <class Call>
void report_extra_memory(benchmark::State& state, Call call, double output_bytes) {
  const double peak = peak_extra_heap_bytes([&] {
    auto result = call();
    benchmark::DoNotOptimize(result);
  });
  state.counters["extra_MiB"] = (peak - output_bytes) / (1024.0 * 1024.0);
}

}  // namespace tvlab::bench
