// Chapter 00 benchmarks: attention and softmax, reference vs optimized vs CUDA, against the
// machine's limits measured in the same run (OpenBLAS SGEMM GFLOP/s, memcpy GB/s).
//
//   build/default/chapters/bench_00_attention_basics --benchmark_counters_tabular=true
//
// Attention FLOPs: 4 n^2 d per head (QK^T and PV, 2 n^2 d each); causal masking is not skipped
// here (the unfused algorithm computes the full matrix), so the count is the same.

#include <benchmark/benchmark.h>

#include <cmath>

#include "../common/bench_support.hpp"
#include "tvlab/opt/blas_kernel.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/cuda/attention_device.hpp"
#include "tvlab/cuda/blas.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "tvlab/opt/attention.hpp"
#include "tvlab/opt/softmax.hpp"
#include "tvlab/ref/attention.hpp"
#include "tvlab/ref/softmax.hpp"

namespace {

using namespace tvlab;
constexpr std::size_t kHeads = 8, kHeadDim = 64;

struct AttentionInputs {
  Tensor3 q, k, v;
  explicit AttentionInputs(std::size_t n) {
    Rng rng(1);
    q = rng.normal_tensor(kHeads, n, kHeadDim);
    k = rng.normal_tensor(kHeads, n, kHeadDim);
    v = rng.normal_tensor(kHeads, n, kHeadDim);
  }
};

double attention_flops(std::size_t n) { return 4.0 * static_cast<double>(n) * n * kHeadDim * kHeads; }

using SdpaFn = Tensor3 (*)(const Tensor3&, const Tensor3&, const Tensor3&, const AttentionConfig&);

// `full_matrix`: the version keeps a whole [n, n] float score matrix per thread (v2) rather than
// one row of scores (the reference: doubles; v1: floats); the counter reports that storage.
void BM_attention(benchmark::State& state, SdpaFn sdpa, bool full_matrix, double bytes_per_score) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const AttentionInputs in(n);
  // Validate first: the optimized output must match the reference (float vs double accumulation).
  if (n <= 512 && sdpa != ref::scaled_dot_product_attention &&
      !bench::validate(state, sdpa(in.q, in.k, in.v, {}), ref::scaled_dot_product_attention(in.q, in.k, in.v, {}), 1e-4))
    return;
  for (auto _ : state) benchmark::DoNotOptimize(sdpa(in.q, in.k, in.v, {}));
  state.counters["GFLOP/s"] = bench::gflops(attention_flops(n));
  const double nn = static_cast<double>(n);
  state.counters["score_buffer_MiB"] = (full_matrix ? nn * nn : nn) * bytes_per_score / (1 << 20);
}

template <Tensor2 (*Softmax)(const Tensor2&)>
void BM_softmax(benchmark::State& state) {
  const auto rows = static_cast<std::size_t>(state.range(0)), cols = static_cast<std::size_t>(state.range(1));
  Rng rng(2);
  const Tensor2 x = rng.normal_matrix(rows, cols, 0, 3);
  // Row reduction of length cols in float: rtol 10 eps sqrt(cols), as in the tests.
  if (!bench::validate(state, Softmax(x), ref::softmax(x), 2e-6, 1.2e-6 * std::sqrt(static_cast<double>(cols)))) return;
  for (auto _ : state) benchmark::DoNotOptimize(Softmax(x));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(2 * rows * cols * sizeof(float)));
}

// CUDA: device pointers, CUDA events, L2 flushed between repeats (see time_kernel_ms).
struct CudaAttention {
  cuda::device::AttentionArgs args;
};

void BM_cuda_attention(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const AttentionInputs in(n);
  cuda::DeviceBuffer<float> q(in.q.data(), in.q.size()), k(in.k.data(), in.k.size()), v(in.v.data(), in.v.size());
  cuda::DeviceBuffer<float> out(in.q.size()), scores(kHeads * n * n);
  CudaAttention ctx;
  ctx.args.q = q.get();
  ctx.args.k = k.get();
  ctx.args.v = v.get();
  ctx.args.out = out.get();
  ctx.args.scores = scores.get();
  ctx.args.heads = kHeads;
  ctx.args.seq_q = ctx.args.seq_k = n;
  ctx.args.head_dim = ctx.args.head_dim_v = kHeadDim;
  ctx.args.scale = 0.125f;
  for (auto _ : state) {
    const double ms = cuda::device::time_kernel_ms(
        [](void* c) { cuda::device::scaled_dot_product_attention(static_cast<CudaAttention*>(c)->args); }, &ctx);
    state.SetIterationTime(ms / 1e3);
  }
  state.counters["TFLOP/s"] = bench::gflops(attention_flops(n) / 1e3);
}

// cuBLAS SGEMM of the same FLOPs as attention's two GEMMs ([h n, d] x [d, n], twice): the vendor
// library doing the matrix work alone; the gap to BM_cuda_attention is the softmax and its traffic.
struct CudaGemm {
  const float *a, *b;
  float* c;
  std::size_t m, n, k;
};

void BM_cuda_cublas_same_flops(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  cuda::DeviceBuffer<float> a(kHeads * n * kHeadDim), b(kHeadDim * n), c(kHeads * n * n);
  cuda::device::fill_bytes(a.get(), 0, a.size() * 4);
  cuda::device::fill_bytes(b.get(), 0, b.size() * 4);
  CudaGemm ctx{a.get(), b.get(), c.get(), kHeads * n, n, kHeadDim};
  for (auto _ : state) {
    const double ms = cuda::device::time_kernel_ms(
        [](void* p) {
          auto* g = static_cast<CudaGemm*>(p);
          cuda::device::sgemm(g->m, g->n, g->k, g->a, g->b, false, g->c);
          cuda::device::sgemm(g->m, g->n, g->k, g->a, g->b, false, g->c);
        },
        &ctx);
    state.SetIterationTime(ms / 1e3);
  }
  state.counters["TFLOP/s"] = bench::gflops(attention_flops(n) / 1e3);
}

}  // namespace

BENCHMARK(tvlab::bench::BM_openblas_sgemm)->Arg(512)->Arg(1024)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(tvlab::bench::BM_memcpy)->Arg(64 << 20)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_softmax<ref::softmax>)->Name("ref_softmax")->Args({1024, 1024})->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_softmax<opt::softmax>)->Name("opt_softmax")->Args({1024, 1024})->Args({4096, 4096})
    ->UseRealTime()->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) {
  tvlab::opt::use_the_best_blas_kernel(argv);  // timings against a fallback kernel would mislead
  benchmark::Initialize(&argc, argv);
  // The reference (double accumulators, one row of scores) and every numbered version, in the
  // lesson's order; v1 keeps one score row per thread, v2 a whole [n, n] matrix per thread.
  benchmark::RegisterBenchmark("ref_attention", BM_attention, ref::scaled_dot_product_attention, false, 8.0)
      ->Arg(128)->Arg(256)->Arg(512)->UseRealTime()->Unit(benchmark::kMillisecond);
  for (const auto& variant : opt::attention_variants()) {
    benchmark::RegisterBenchmark(("opt_" + variant.name + "_attention").c_str(), BM_attention, variant.function,
                                 variant.full_score_matrix, 4.0)
        ->Arg(128)->Arg(256)->Arg(512)->Arg(1024)->Arg(2048)->UseRealTime()->Unit(benchmark::kMillisecond);
  }
  if (tvlab::cuda::device_available()) {
    for (long n : {1024L, 4096L, 8192L}) {
      benchmark::RegisterBenchmark("cuda_attention", BM_cuda_attention)->Arg(n)->UseManualTime()->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark("cuda_cublas_same_flops", BM_cuda_cublas_same_flops)->Arg(n)->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::AddCustomContext("cuda", tvlab::cuda::device_description());
  benchmark::AddCustomContext("openblas_kernel", tvlab::opt::blas_core_name());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
