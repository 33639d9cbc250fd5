// Chapter 02 benchmarks: applying RoPE (memory-bound: GB/s against an in-place scaling pass and a
// memcpy measured in the same run) and attention with RoPE and ALiBi inside (GFLOP/s against
// OpenBLAS SGEMM).
//
//   build/default/chapters/bench_02_position_encoding --benchmark_counters_tabular=true

#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "../common/bench_support.hpp"
#include "tvlab/opt/blas_kernel.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/cuda/rope_device.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "tvlab/opt/attention.hpp"
#include "tvlab/opt/rope.hpp"
#include "tvlab/opt/rope_attention.hpp"
#include "tvlab/ref/alibi.hpp"
#include "tvlab/ref/attention.hpp"
#include "tvlab/ref/rope.hpp"
#include "tvlab/ref/rope_attention.hpp"

namespace {

using namespace tvlab;

RopeFrequencies llama_frequencies(int head_dim) {
  RopeConfig cfg;
  cfg.head_dim = head_dim;
  cfg.rope_theta = 500000;
  cfg.max_position_embeddings = 8192;
  return ref::rope_frequencies(cfg);
}

// RoPE traffic (compared with stream_scale_inplace, the same bytes): read x and write it back, 2 * heads * seq * d * 4 bytes (the cos/sin cache is
// seq * d floats, reused by every head, and stays in cache).
int64_t rope_bytes(const benchmark::State& s, std::size_t heads, std::size_t seq, std::size_t d) {
  return static_cast<int64_t>(s.iterations()) * static_cast<int64_t>(2 * heads * seq * d * sizeof(float));
}

// The machine's limit for an in-place pass: x_i <- s x_i over the same bytes, threaded like
// RoPE (read and write every element once, the least arithmetic possible). memcpy is listed too,
// but it writes to a second buffer and a large last-level cache can favour either.
void BM_stream_scale_inplace(benchmark::State& state) {
  const auto heads = static_cast<std::size_t>(state.range(0)), seq = static_cast<std::size_t>(state.range(1));
  std::vector<float> x(heads * seq * 128, 1.0f);
  volatile float one = 1.0f;  // unknown to the compiler, so the loop is not removed
  const float s = one;
  const auto n = static_cast<std::ptrdiff_t>(x.size());
  for (auto _ : state) {
#pragma omp parallel for simd schedule(static)
    for (std::ptrdiff_t i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] *= s;
    benchmark::DoNotOptimize(x.data());
  }
  state.SetBytesProcessed(rope_bytes(state, heads, seq, 128));
}

// Reference: cos and sin evaluated per element, a fresh output tensor.
void BM_ref_apply_rope(benchmark::State& state) {
  const auto heads = static_cast<std::size_t>(state.range(0)), seq = static_cast<std::size_t>(state.range(1));
  const std::size_t d = 128;
  Rng rng(1);
  const Tensor3 x = rng.normal_tensor(heads, seq, d);
  const RopeFrequencies f = llama_frequencies(128);
  for (auto _ : state) benchmark::DoNotOptimize(ref::apply_rope(x, f, RopeLayout::half_split, 0));
  state.SetBytesProcessed(rope_bytes(state, heads, seq, d));
}

// Optimized, in place with a prebuilt cache (what a model does: the cache is built once).
void BM_opt_apply_rope_inplace(benchmark::State& state) {
  const auto heads = static_cast<std::size_t>(state.range(0)), seq = static_cast<std::size_t>(state.range(1));
  const auto layout = state.range(2) ? RopeLayout::interleaved : RopeLayout::half_split;
  const std::size_t d = 128;
  Rng rng(1);
  Tensor3 x = rng.normal_tensor(heads, seq, d);
  const RopeFrequencies f = llama_frequencies(128);
  const opt::RopeCache cache = opt::make_rope_cache(f, 0, static_cast<long long>(seq));
  {
    Tensor3 y = x;
    opt::apply_rope_inplace(y, cache, layout, 0);
    if (!bench::validate(state, y, ref::apply_rope(x, f, layout, 0), 2e-6, 1e-6)) return;
  }
  // Rotating back and forth would need the inverse; rotating the same buffer repeatedly is the
  // same work (each call reads and writes every element once).
  for (auto _ : state) {
    opt::apply_rope_inplace(x, cache, layout, 0);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetBytesProcessed(rope_bytes(state, heads, seq, d));
}

// Attention FLOPs: 4 n^2 d per head (QK^T and PV), halved when causal.
double attention_flops(std::size_t heads, std::size_t n, std::size_t d) {
  return 4.0 * static_cast<double>(heads * n * n * d) / 2;
}

enum class Positions { none, rope_fused, rope_separate, alibi };

// Causal attention, 8 heads, d = 64: without positions, with RoPE inside (fused into v2's
// copies of q and k, or v1's separate pass), with RoPE applied beforehand as a separate pass, and
// with ALiBi.
template <Tensor3 (*Attention)(const Tensor3&, const Tensor3&, const Tensor3&, const AttentionConfig&),
          Tensor3 (*RopeAttention)(const Tensor3&, const Tensor3&, const Tensor3&, const AttentionRope&,
                                   const AttentionConfig&)>
void BM_attention(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto positions = static_cast<Positions>(state.range(1));
  const std::size_t heads = 8, d = 64;
  Rng rng(2);
  const Tensor3 q = rng.normal_tensor(heads, n, d), k = rng.normal_tensor(heads, n, d), v = rng.normal_tensor(heads, n, d);
  AttentionConfig cfg;
  cfg.mask.causal = true;
  const RopeFrequencies f = llama_frequencies(64);
  const AttentionRope rope{f, RopeLayout::half_split, 0};
  if (positions == Positions::alibi) cfg.mask.alibi_slopes = ref::alibi_slopes(static_cast<int>(heads));
  auto run = [&] {
    if (positions == Positions::rope_fused) return RopeAttention(q, k, v, rope, cfg);
    if (positions != Positions::rope_separate) return Attention(q, k, v, cfg);
    return Attention(opt::apply_rope(q, f, RopeLayout::half_split, 0), opt::apply_rope(k, f, RopeLayout::half_split, 0),
                     v, cfg);
  };
  if (n <= 512) {
    const bool rotated = positions == Positions::rope_fused || positions == Positions::rope_separate;
    const Tensor3 expected =
        rotated ? ref::rope_attention(q, k, v, rope, cfg) : ref::scaled_dot_product_attention(q, k, v, cfg);
    if (!bench::validate(state, run(), expected, 1e-3)) return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(run());
  state.counters["GFLOP/s"] = bench::gflops(attention_flops(heads, n, d));
}

struct CudaRope {
  float *x = nullptr, *cos = nullptr, *sin = nullptr;
  std::size_t rows = 0, seq = 0;
};

void BM_cuda_apply_rope(benchmark::State& state) {
  const auto heads = static_cast<std::size_t>(state.range(0)), seq = static_cast<std::size_t>(state.range(1));
  const opt::RopeCache cache = opt::make_rope_cache(llama_frequencies(128), 0, static_cast<long long>(seq));
  cuda::DeviceBuffer<float> x(heads * seq * 128), c(cache.cos.data(), cache.cos.size()), s(cache.sin.data(), cache.sin.size());
  cuda::device::fill_bytes(x.get(), 0, heads * seq * 128 * sizeof(float));
  CudaRope ctx{x.get(), c.get(), s.get(), heads * seq, seq};
  for (auto _ : state) {
    const double ms = cuda::device::time_kernel_ms(
        [](void* p) {
          auto* r = static_cast<CudaRope*>(p);
          cuda::device::apply_rope_inplace(r->x, r->rows, r->seq, 128, r->cos, r->sin, false);
        },
        &ctx);
    state.SetIterationTime(ms / 1e3);
  }
  state.SetBytesProcessed(rope_bytes(state, heads, seq, 128));
}

}  // namespace

// 64 MiB fits in a large last-level cache (260 MiB on the machine the lesson reports), 512 MiB
// does not: RoPE is compared with the memcpy of the same size.
BENCHMARK(tvlab::bench::BM_memcpy)->Arg(64 << 20)->Arg(512 << 20)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(tvlab::bench::BM_openblas_sgemm)->Arg(1024)->UseRealTime()->Unit(benchmark::kMillisecond);
// 32 heads x 4096 positions x 128 floats = 64 MiB; x 32768 positions = 512 MiB.
BENCHMARK(BM_stream_scale_inplace)->Name("stream_scale_inplace")->ArgNames({"heads", "seq"})->Args({32, 4096})
    ->Args({32, 32768})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ref_apply_rope)->Name("ref_apply_rope")->Args({32, 4096})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_opt_apply_rope_inplace)->Name("opt_apply_rope_inplace")->ArgNames({"heads", "seq", "interleaved"})
    ->Args({32, 4096, 0})->Args({32, 4096, 1})->Args({32, 32768, 0})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_attention<ref::scaled_dot_product_attention, ref::rope_attention>)->Name("ref_attention")->ArgNames({"n", "positions"})
    ->Args({256, 0})->Args({256, 1})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_attention<opt::scaled_dot_product_attention_v1, opt::rope_attention_v1>)->Name("opt_v1_attention")->ArgNames({"n", "positions"})
    ->Args({1024, 0})->Args({1024, 1})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_attention<opt::scaled_dot_product_attention_v2, opt::rope_attention_v2>)->Name("opt_v2_attention")->ArgNames({"n", "positions"})
    ->Args({1024, 0})->Args({1024, 1})->Args({1024, 2})->Args({1024, 3})->UseRealTime()->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  tvlab::opt::use_the_best_blas_kernel(argv);  // timings against a fallback kernel would mislead
  benchmark::Initialize(&argc, argv);
  if (tvlab::cuda::device_available()) {
    benchmark::RegisterBenchmark("cuda_apply_rope", BM_cuda_apply_rope)->Args({32, 4096})->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::AddCustomContext("cuda", tvlab::cuda::device_description());
  benchmark::AddCustomContext("openblas_kernel", tvlab::opt::blas_core_name());
  benchmark::AddCustomContext("positions", "0 none, 1 RoPE inside attention, 2 RoPE as a separate pass before, 3 ALiBi");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
