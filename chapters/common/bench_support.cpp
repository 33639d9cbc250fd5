#include "bench_support.hpp"

#include <cblas.h>

#include <cstring>
#include <vector>

namespace tvlab::bench {

void BM_openblas_sgemm(benchmark::State& state) {
  const auto n = static_cast<int>(state.range(0));
  std::vector<float> a(static_cast<std::size_t>(n) * n, 1.0f), b(a.size(), 0.5f), c(a.size());
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = gflops(2.0 * n * n * n);
}

void BM_stream_scale(benchmark::State& state) {
  const auto n = static_cast<std::ptrdiff_t>(state.range(0) / static_cast<std::int64_t>(sizeof(float)));
  std::vector<float> x(static_cast<std::size_t>(n), 1.0f), y(static_cast<std::size_t>(n));
  volatile float one = 1.0f;  // unknown to the compiler, so the loop is not removed
  const float s = one;
  for (auto _ : state) {
#pragma omp parallel for simd schedule(static)
    for (std::ptrdiff_t i = 0; i < n; ++i) y[static_cast<std::size_t>(i)] = s * x[static_cast<std::size_t>(i)];
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * state.range(0));
}

void BM_memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<char> src(bytes, 1), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(2 * bytes));
}

}  // namespace tvlab::bench
