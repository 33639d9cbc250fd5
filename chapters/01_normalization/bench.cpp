// Chapter 01 benchmarks: norms and activations (memory-bound: GB/s against a memcpy measured in
// the same run) and the FFNs (compute-bound: GFLOP/s against OpenBLAS SGEMM).
//
//   build/default/chapters/bench_01_normalization --benchmark_counters_tabular=true

#include <benchmark/benchmark.h>

#include <cmath>

#include "../common/bench_support.hpp"
#include "tvlab/opt/blas_kernel.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/cuda/ffn_device.hpp"
#include "tvlab/cuda/normalization_device.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "tvlab/opt/activations.hpp"
#include "tvlab/opt/ffn.hpp"
#include "tvlab/opt/normalization.hpp"
#include "tvlab/ref/activations.hpp"
#include "tvlab/ref/ffn.hpp"
#include "tvlab/ref/normalization.hpp"

namespace {

using namespace tvlab;

// Norm traffic: read x and write y (gamma/beta are d floats, negligible): 2 * tokens * d * 4 bytes.
int64_t norm_bytes(const benchmark::State& s, std::size_t tokens, std::size_t d) {
  return static_cast<int64_t>(s.iterations()) * static_cast<int64_t>(2 * tokens * d * sizeof(float));
}

// Reference: returns a fresh tensor (its allocation is part of its cost).
void BM_ref_layer_norm(benchmark::State& state) {
  const auto tokens = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  Rng rng(1);
  const Tensor2 x = rng.normal_matrix(tokens, d);
  const Tensor1 g = rng.normal_vector(d, 1, 0.1), b = rng.normal_vector(d, 0, 0.1);
  for (auto _ : state) benchmark::DoNotOptimize(ref::layer_norm(x, g, b, 1e-5));
  state.SetBytesProcessed(norm_bytes(state, tokens, d));
}

void BM_ref_rms_norm(benchmark::State& state) {
  const auto tokens = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  Rng rng(1);
  const Tensor2 x = rng.normal_matrix(tokens, d);
  const Tensor1 g = rng.normal_vector(d, 1, 0.1);
  for (auto _ : state) benchmark::DoNotOptimize(ref::rms_norm(x, g, 1e-6));
  state.SetBytesProcessed(norm_bytes(state, tokens, d));
}

// Optimized: writes into a preallocated output, so the time is the kernel's (see layer_norm_into).
void BM_opt_layer_norm(benchmark::State& state) {
  const auto tokens = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  Rng rng(1);
  const Tensor2 x = rng.normal_matrix(tokens, d);
  const Tensor1 g = rng.normal_vector(d, 1, 0.1), b = rng.normal_vector(d, 0, 0.1);
  Tensor2 y = xt::zeros<float>({tokens, d});
  opt::layer_norm_into(x, g, b, 1e-5, y);
  if (!bench::validate(state, y, ref::layer_norm(x, g, b, 1e-5), 1e-4)) return;
  for (auto _ : state) {
    opt::layer_norm_into(x, g, b, 1e-5, y);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(norm_bytes(state, tokens, d));
}

void BM_opt_rms_norm(benchmark::State& state) {
  const auto tokens = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  Rng rng(1);
  const Tensor2 x = rng.normal_matrix(tokens, d);
  const Tensor1 g = rng.normal_vector(d, 1, 0.1);
  Tensor2 y = xt::zeros<float>({tokens, d});
  opt::rms_norm_into(x, g, 1e-6, y);
  if (!bench::validate(state, y, ref::rms_norm(x, g, 1e-6), 1e-4)) return;
  for (auto _ : state) {
    opt::rms_norm_into(x, g, 1e-6, y);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(norm_bytes(state, tokens, d));
}

template <Tensor2 (*Act)(const Tensor2&), Tensor2 (*Ref)(const Tensor2&)>
void BM_activation(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  Rng rng(2);
  const Tensor2 x = rng.normal_matrix(n, 1024, 0, 2);
  if (!bench::validate(state, Act(x), Ref(x), 2e-6)) return;
  for (auto _ : state) benchmark::DoNotOptimize(Act(x));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(2 * n * 1024 * sizeof(float)));
}

// SwiGLU FFN: three [tokens, d] x [d, d_ff]-sized products = 6 tokens d d_ff FLOPs.
template <Tensor2 (*Ffn)(const Tensor2&, const SwigluWeights&)>
void BM_ffn_swiglu(benchmark::State& state) {
  const auto tokens = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const std::size_t d_ff = 8 * d / 3 / 64 * 64;
  Rng rng(3);
  const double s = 1 / std::sqrt(static_cast<double>(d));
  const SwigluWeights w{rng.normal_matrix(d, d_ff, 0, s), rng.normal_matrix(d, d_ff, 0, s), rng.normal_matrix(d_ff, d, 0, s)};
  const Tensor2 x = rng.normal_matrix(tokens, d);
  if (tokens * d <= 64 * 512 && !bench::validate(state, Ffn(x, w), ref::ffn_swiglu(x, w), 1e-3)) return;
  for (auto _ : state) benchmark::DoNotOptimize(Ffn(x, w));
  state.counters["GFLOP/s"] = bench::gflops(6.0 * tokens * d * d_ff);
}

struct CudaNorm {
  cuda::device::NormArgs args;
};

void BM_cuda_rms_norm(benchmark::State& state) {
  const auto tokens = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  cuda::DeviceBuffer<float> x(tokens * d), g(d), y(tokens * d);
  cuda::device::fill_bytes(x.get(), 0, tokens * d * 4);
  cuda::device::fill_bytes(g.get(), 0, d * 4);
  CudaNorm ctx;
  ctx.args = {x.get(), g.get(), nullptr, y.get(), tokens, d, 1e-6f};
  for (auto _ : state) {
    const double ms = cuda::device::time_kernel_ms([](void* c) { cuda::device::rms_norm_forward(static_cast<CudaNorm*>(c)->args); }, &ctx);
    state.SetIterationTime(ms / 1e3);
  }
  state.SetBytesProcessed(norm_bytes(state, tokens, d));
}

}  // namespace

// 64 MiB fits in a large last-level cache (260 MiB on the machine the lesson reports), 512 MiB
// does not: the norms are compared with a threaded stream over the same bytes (and memcpy).
BENCHMARK(tvlab::bench::BM_memcpy)->Arg(64 << 20)->Arg(512 << 20)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(tvlab::bench::BM_stream_scale)->Arg(64 << 20)->Arg(512 << 20)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(tvlab::bench::BM_openblas_sgemm)->Arg(1024)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ref_layer_norm)->Name("ref_layer_norm")->Args({4096, 4096})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_opt_layer_norm)->Name("opt_layer_norm")->Args({4096, 4096})->Args({16384, 8192})->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ref_rms_norm)->Name("ref_rms_norm")->Args({4096, 4096})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_opt_rms_norm)->Name("opt_rms_norm")->Args({4096, 4096})->Args({16384, 8192})->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_activation<opt::gelu, ref::gelu>)->Name("opt_gelu")->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_activation<ref::gelu, ref::gelu>)->Name("ref_gelu")->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_activation<opt::silu, ref::silu>)->Name("opt_silu")->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_activation<ref::silu, ref::silu>)->Name("ref_silu")->Arg(4096)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ffn_swiglu<ref::ffn_swiglu>)->Name("ref_ffn_swiglu")->Args({64, 512})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ffn_swiglu<opt::ffn_swiglu>)->Name("opt_ffn_swiglu")->Args({64, 512})->Args({512, 1024})
    ->UseRealTime()->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  tvlab::opt::use_the_best_blas_kernel(argv);  // timings against a fallback kernel would mislead
  benchmark::Initialize(&argc, argv);
  if (tvlab::cuda::device_available()) {
    benchmark::RegisterBenchmark("cuda_rms_norm", BM_cuda_rms_norm)->Args({16384, 4096})->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::AddCustomContext("cuda", tvlab::cuda::device_description());
  benchmark::AddCustomContext("openblas_kernel", tvlab::opt::blas_core_name());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
