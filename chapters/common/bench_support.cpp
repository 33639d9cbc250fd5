#include "bench_support.hpp"

#include <cblas.h>

#include <cstring>
#include <exception>
#include <map>
#include <sstream>
#include <vector>


namespace tvlab::bench {

// ------------------------------------------------------------------ the machine's limits

void BM_openblas_sgemm(benchmark::State& state) {
  const auto n = static_cast<int>(state.range(0));
  std::vector<float> a(static_cast<std::size_t>(n) * n, 1.0f), b(a.size(), 0.5f), c(a.size());
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = gflops(2.0 * n * n * n);
}

// y = W x for W [rows, cols] in float: the fp32 decode-step product a quantized one replaces; it
// reads W once, 4 bytes per weight.
void BM_openblas_sgemv(benchmark::State& state) {
  const auto rows = static_cast<int>(state.range(0)), cols = static_cast<int>(state.range(1));
  std::vector<float> w(static_cast<std::size_t>(rows) * cols, 0.01f), x(static_cast<std::size_t>(cols), 1.0f),
      y(static_cast<std::size_t>(rows));
  for (auto _ : state) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, rows, cols, 1.0f, w.data(), cols, x.data(), 1, 0.0f, y.data(), 1);
    benchmark::DoNotOptimize(y.data());
  }
  set_bytes(state, 4.0 * static_cast<double>(rows) * cols);
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
  set_bytes(state, 2.0 * static_cast<double>(state.range(0)));
}

void BM_stream_scale_inplace(benchmark::State& state) {
  const auto n = static_cast<std::ptrdiff_t>(state.range(0) / static_cast<std::int64_t>(sizeof(float)));
  std::vector<float> x(static_cast<std::size_t>(n), 1.0f);
  volatile float one = 1.0f;  // unknown to the compiler, so the loop is not removed
  const float s = one;
  for (auto _ : state) {
#pragma omp parallel for simd schedule(static)
    for (std::ptrdiff_t i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] *= s;
    benchmark::DoNotOptimize(x.data());
  }
  set_bytes(state, 2.0 * static_cast<double>(state.range(0)));
}

void BM_memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<char> src(bytes, 1), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2.0 * static_cast<double>(bytes));
}

namespace {
void add_baseline(const char* name, void (*function)(benchmark::State&), const std::vector<std::int64_t>& sizes) {
  auto* b = benchmark::RegisterBenchmark(name, function);
  for (const std::int64_t size : sizes) b->Arg(size);
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}
}  // namespace

void add_openblas_sgemm(const std::vector<std::int64_t>& sizes) { add_baseline("openblas_sgemm", BM_openblas_sgemm, sizes); }
void add_openblas_sgemv(const std::vector<std::pair<std::int64_t, std::int64_t>>& shapes) {
  auto* b = benchmark::RegisterBenchmark("openblas_sgemv", BM_openblas_sgemv);
  for (const auto& [rows, cols] : shapes) b->Args({rows, cols});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}
void add_memcpy(const std::vector<std::int64_t>& bytes) { add_baseline("memcpy", BM_memcpy, bytes); }
void add_stream_scale(const std::vector<std::int64_t>& bytes) { add_baseline("stream_scale", BM_stream_scale, bytes); }
void add_stream_scale_inplace(const std::vector<std::int64_t>& bytes) {
  add_baseline("stream_scale_inplace", BM_stream_scale_inplace, bytes);
}

// ------------------------------------------------------------------ validation

bool validate_values(benchmark::State& state, const std::vector<std::size_t>& actual_shape, const float* actual,
                     const std::vector<std::size_t>& reference_shape, const float* reference, Tolerance tol) {
  if (actual_shape != reference_shape) {
    state.SkipWithError(("shape " + shape_string(actual_shape) + ", the reference's " + shape_string(reference_shape)).c_str());
    return false;
  }
  std::size_t size = 1;
  for (const std::size_t extent : actual_shape) size *= extent;
  std::size_t mismatches = 0, first = 0;
  for (std::size_t i = 0; i < size; ++i) {
    const double x = actual[i], r = reference[i];
    if (!(std::abs(x - r) <= tol.atol + tol.rtol * std::abs(r)) && mismatches++ == 0) first = i;  // NaN fails too
  }
  if (mismatches == 0) return true;
  // The flat index as coordinates, last axis fastest (row-major).
  std::vector<std::size_t> index(actual_shape.size());
  for (std::size_t axis = actual_shape.size(), rest = first; axis-- > 0;) {
    index[axis] = rest % actual_shape[axis];
    rest /= actual_shape[axis];
  }
  std::ostringstream message;
  message << "disagrees with the reference: " << mismatches << " of " << size << " elements outside "
          << tol.atol << " + " << tol.rtol << " |ref|, the first at " << format_index(index, {}) << ": " << actual[first]
          << ", the reference " << reference[first];
  state.SkipWithError(message.str().c_str());
  return false;
}

// ------------------------------------------------------------------ the registry

namespace {
std::map<std::string, std::string>& not_timed_by_reason() {
  static std::map<std::string, std::string> names;  // reason -> "a, b, c"
  return names;
}
}  // namespace

void note_not_timed(const std::string& name, const std::string& reason) {
  std::string& names = not_timed_by_reason()[reason];
  names += (names.empty() ? "" : ", ") + name;
}

std::string not_timed_summary() {
  std::string summary;
  for (const auto& [reason, names] : not_timed_by_reason()) summary += (summary.empty() ? "" : "; ") + names + ": " + reason;
  return summary;
}

void run_guarded(benchmark::State& state, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {  // NotImplemented's message names the exercise
    state.SkipWithError(e.what());
  }
}

void add_benchmark(const std::string& name, const std::function<void(benchmark::State&)>& body, const Shapes& shapes) {
  auto* b = benchmark::RegisterBenchmark(name.c_str(), [body](benchmark::State& state) {
    run_guarded(state, [&] { body(state); });
  });
  b->UseRealTime()->Unit(benchmark::kMillisecond);
  shapes(b);
}

}  // namespace tvlab::bench
