// Chapter 04 benchmarks: flash attention against chapter 00's attention (SGEMM + softmax over the
// whole n x n score matrix) and against the reference loops, in GFLOP/s (4 n^2 d per head, halved
// when causal) next to OpenBLAS SGEMM measured in the same run, with the extra memory each
// version allocates besides its output.
//
//   build/default/chapters/bench_04_flash_attention --benchmark_counters_tabular=true

#include <benchmark/benchmark.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "../common/bench_support.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/opt/attention.hpp"
#include "tvlab/opt/blas_kernel.hpp"
#include "tvlab/opt/flash_attention.hpp"
#include "tvlab/ref/flash_attention.hpp"
#include "tvlab/cuda/attention_device.hpp"
#include "tvlab/cuda/flash_attention_device.hpp"
#include "tvlab/cuda/runtime.hpp"

// ------------------------------------------------------------------ heap accounting
// Every operator new of this program goes through these counters, so a benchmark can report the
// peak number of bytes a call allocated beyond what it returns (OpenBLAS's own work buffers are
// mmap'ed by the library and not counted; they do not grow with n).

namespace {
std::atomic<long long> heap_now{0}, heap_peak{0};

void* counted_alloc(std::size_t size) {
  void* p = std::malloc(size ? size : 1);
  if (!p) throw std::bad_alloc();
  const long long now = heap_now += static_cast<long long>(malloc_usable_size(p));
  long long peak = heap_peak.load();
  while (now > peak && !heap_peak.compare_exchange_weak(peak, now)) {
  }
  return p;
}

void counted_free(void* p) noexcept {
  if (!p) return;
  heap_now -= static_cast<long long>(malloc_usable_size(p));
  std::free(p);
}
}  // namespace

void* operator new(std::size_t size) { return counted_alloc(size); }
void* operator new[](std::size_t size) { return counted_alloc(size); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }

namespace {

using namespace tvlab;

constexpr std::size_t kHeads = 8;

struct Inputs {
  Tensor3 q, k, v;
  Inputs(std::size_t n, std::size_t d) {
    Rng rng(4);
    q = rng.normal_tensor(kHeads, n, d);
    k = rng.normal_tensor(kHeads, n, d);
    v = rng.normal_tensor(kHeads, n, d);
  }
};

double attention_flops(std::size_t n, std::size_t d, bool causal) {
  return 4.0 * static_cast<double>(kHeads * n * n * d) / (causal ? 2.0 : 1.0);
}

// Runs `call` once outside the timing loop to measure the peak extra heap it allocates (bytes
// beyond its output), reported as the counter extra_MiB.
template <class Call>
void report_extra_memory(benchmark::State& state, Call call, double output_bytes) {
  const long long before = heap_now.load();
  heap_peak = before;
  {
    auto result = call();
    benchmark::DoNotOptimize(result);
  }
  state.counters["extra_MiB"] = (static_cast<double>(heap_peak.load() - before) - output_bytes) / (1024.0 * 1024.0);
}

// args: n, d, causal
void BM_flash(benchmark::State& state, FlashOutput (*flash)(const Tensor3&, const Tensor3&, const Tensor3&, const FlashConfig&),
              bool validate) {
  const auto n = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const bool causal = state.range(2) != 0;
  const Inputs in(n, d);
  FlashConfig cfg;
  cfg.mask.causal = causal;
  if (validate) {
    AttentionConfig same;
    same.mask.causal = causal;
    if (!bench::validate(state, flash(in.q, in.k, in.v, cfg).out, opt::scaled_dot_product_attention(in.q, in.k, in.v, same),
                         2e-4, 1e-3))
      return;
  }
  const double output_bytes = static_cast<double>(kHeads * n * (d + 1) * sizeof(float));  // O and the log-sum-exp
  report_extra_memory(state, [&] { return flash(in.q, in.k, in.v, cfg); }, output_bytes);
  for (auto _ : state) benchmark::DoNotOptimize(flash(in.q, in.k, in.v, cfg));
  state.counters["GFLOP/s"] = bench::gflops(attention_flops(n, d, causal));
}

void BM_ref_flash(benchmark::State& state) { BM_flash(state, ref::flash_attention_forward, false); }
void BM_opt_flash_v1(benchmark::State& state) { BM_flash(state, opt::flash_attention_forward_v1, state.range(0) <= 1024); }
void BM_opt_flash_v2(benchmark::State& state) { BM_flash(state, opt::flash_attention_forward_v2, state.range(0) <= 1024); }

// Chapter 00's headline attention: S = QK^T and O = PV as SGEMMs around a softmax over the whole
// score matrix (one [n, n] buffer per thread).
void BM_naive_sgemm(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const bool causal = state.range(2) != 0;
  const Inputs in(n, d);
  AttentionConfig cfg;
  cfg.mask.causal = causal;
  report_extra_memory(state, [&] { return opt::scaled_dot_product_attention(in.q, in.k, in.v, cfg); },
                      static_cast<double>(kHeads * n * d * sizeof(float)));
  for (auto _ : state) benchmark::DoNotOptimize(opt::scaled_dot_product_attention(in.q, in.k, in.v, cfg));
  state.counters["GFLOP/s"] = bench::gflops(attention_flops(n, d, causal));
}

// Backward pass from the forward's output and log-sum-exp. FLOPs as FlashAttention counts them:
// 2.5 times the forward (five n x n x d products instead of two), halved when causal.
template <FlashGrads (*Backward)(const Tensor3&, const Tensor3&, const Tensor3&, const Tensor3&, const Tensor2&,
                                 const Tensor3&, const FlashConfig&)>
void BM_backward(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const Inputs in(n, d);
  FlashConfig cfg;
  cfg.mask.causal = state.range(2) != 0;
  const FlashOutput fwd = opt::flash_attention_forward(in.q, in.k, in.v, cfg);
  Rng rng(6);
  const Tensor3 dout = rng.normal_tensor(kHeads, n, d);
  for (auto _ : state) benchmark::DoNotOptimize(Backward(in.q, in.k, in.v, fwd.out, fwd.lse, dout, cfg));
  state.counters["GFLOP/s"] = bench::gflops(2.5 * attention_flops(n, d, cfg.mask.causal));
}

// CUDA (registered when a device is present): the tiled fp32 flash kernel and the tensor-core
// kernel (fp16, bf16) against chapter 00's unfused cuBLAS path (two batched SGEMMs around a softmax kernel over the n x n scores), timed
// with CUDA events and an L2 flush between repeats. TFLOP/s.
struct CudaRun {
  cuda::device::FlashArgs flash;
  cuda::device::AttentionArgs unfused;
};

void BM_cuda(benchmark::State& state, bool flash) {
  const auto n = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const bool causal = state.range(2) != 0;
  const Inputs in(n, d);
  cuda::DeviceBuffer<float> q(in.q.data(), in.q.size()), k(in.k.data(), in.k.size()), v(in.v.data(), in.v.size());
  cuda::DeviceBuffer<float> out(in.q.size()), lse(kHeads * n), scores(flash ? 0 : kHeads * n * n);
  CudaRun run;
  run.flash = {q.get(), k.get(), v.get(), out.get(), lse.get(), kHeads, n, n, d, d, 64, 64,
               static_cast<float>(1 / std::sqrt(static_cast<double>(d))), causal};
  run.unfused.q = q.get();
  run.unfused.k = k.get();
  run.unfused.v = v.get();
  run.unfused.out = out.get();
  run.unfused.scores = scores.get();
  run.unfused.heads = kHeads;
  run.unfused.seq_q = run.unfused.seq_k = n;
  run.unfused.head_dim = run.unfused.head_dim_v = d;
  run.unfused.scale = run.flash.scale;
  run.unfused.causal = causal;
  for (auto _ : state) {
    const double ms = flash ? cuda::device::time_kernel_ms([](void* c) { cuda::device::flash_forward_tiled(static_cast<CudaRun*>(c)->flash); }, &run)
                            : cuda::device::time_kernel_ms([](void* c) { cuda::device::scaled_dot_product_attention(static_cast<CudaRun*>(c)->unfused); }, &run);
    state.SetIterationTime(ms / 1e3);
  }
  state.counters["TFLOP/s"] = bench::gflops(attention_flops(n, d, causal) / 1e3);
}

// The CUDA backward pass on the forward kernel's out and lse, FLOPs counted as FlashAttention
// does (2.5 times the forward's).
void BM_cuda_backward(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const bool causal = state.range(2) != 0;
  const Inputs in(n, d);
  const Tensor3 dout_host = Rng(5).normal_tensor(kHeads, n, d);
  cuda::DeviceBuffer<float> q(in.q.data(), in.q.size()), k(in.k.data(), in.k.size()), v(in.v.data(), in.v.size());
  cuda::DeviceBuffer<float> out(in.q.size()), lse(kHeads * n), dout(dout_host.data(), dout_host.size());
  cuda::DeviceBuffer<float> delta(kHeads * n), dq(in.q.size()), dk(in.k.size()), dv(in.v.size());
  const auto scale = static_cast<float>(1 / std::sqrt(static_cast<double>(d)));
  cuda::device::flash_forward_tiled({q.get(), k.get(), v.get(), out.get(), lse.get(), kHeads, n, n, d, d, 64, 64, scale, causal});
  cuda::device::FlashBackwardArgs args{q.get(), k.get(), v.get(), out.get(), lse.get(), dout.get(), delta.get(),
                                       dq.get(), dk.get(), dv.get(), kHeads, n, n, d, d, 64, 64, scale, causal};
  for (auto _ : state) {
    const double ms = cuda::device::time_kernel_ms(
        [](void* c) { cuda::device::flash_backward(*static_cast<cuda::device::FlashBackwardArgs*>(c)); }, &args);
    state.SetIterationTime(ms / 1e3);
  }
  state.counters["TFLOP/s"] = bench::gflops(2.5 * attention_flops(n, d, causal) / 1e3);
}

void BM_cuda_flash(benchmark::State& state) { BM_cuda(state, true); }
void BM_cuda_unfused(benchmark::State& state) { BM_cuda(state, false); }

// The tensor-core kernel on fp16 or bf16 inputs (rounded once on the host, outside the timing),
// tiles of 64 x 64: the same FLOP count, so its TFLOP/s compare directly with the fp32 kernels'.
void BM_cuda_tensor_core(benchmark::State& state, bool bf16) {
  const auto n = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const bool causal = state.range(2) != 0;
  const Inputs in(n, d);
  const FlashInputs format = bf16 ? FlashInputs::bf16 : FlashInputs::fp16;
  const std::vector<std::uint16_t> hq = to_16_bit_inputs(in.q, format), hk = to_16_bit_inputs(in.k, format),
                                   hv = to_16_bit_inputs(in.v, format);
  cuda::DeviceBuffer<std::uint16_t> q(hq.data(), hq.size()), k(hk.data(), hk.size()), v(hv.data(), hv.size());
  cuda::DeviceBuffer<float> out(in.q.size()), lse(kHeads * n);
  cuda::device::FlashTensorCoreArgs args;
  args.q = q.get();
  args.k = k.get();
  args.v = v.get();
  args.bf16 = bf16;
  args.out = out.get();
  args.lse = lse.get();
  args.heads = kHeads;
  args.seq_q = args.seq_k = n;
  args.head_dim = args.head_dim_v = d;
  args.block_q = args.block_k = 64;
  args.scale = static_cast<float>(1 / std::sqrt(static_cast<double>(d)));
  args.causal = causal;
  for (auto _ : state) {
    const double ms = cuda::device::time_kernel_ms(
        [](void* c) { cuda::device::flash_forward_tensor_core(*static_cast<cuda::device::FlashTensorCoreArgs*>(c)); }, &args);
    state.SetIterationTime(ms / 1e3);
  }
  state.counters["TFLOP/s"] = bench::gflops(attention_flops(n, d, causal) / 1e3);
}

void BM_cuda_tensor_core_fp16(benchmark::State& state) { BM_cuda_tensor_core(state, false); }
void BM_cuda_tensor_core_bf16(benchmark::State& state) { BM_cuda_tensor_core(state, true); }

}  // namespace

BENCHMARK(tvlab::bench::BM_openblas_sgemm)->Arg(1024)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ref_flash)->Name("ref_flash")->ArgNames({"n", "d", "causal"})->Args({512, 64, 0})->Args({1024, 64, 1})
    ->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_opt_flash_v1)->Name("opt_flash_v1")->ArgNames({"n", "d", "causal"})->Args({1024, 64, 1})->Args({4096, 64, 1})
    ->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_naive_sgemm)->Name("ch00_sgemm_attention")->ArgNames({"n", "d", "causal"})
    ->ArgsProduct({{512, 1024, 2048, 4096, 8192, 16384}, {64}, {0, 1}})->Args({4096, 128, 1})
    ->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_opt_flash_v2)->Name("opt_flash_v2")->ArgNames({"n", "d", "causal"})
    ->ArgsProduct({{512, 1024, 2048, 4096, 8192, 16384}, {64}, {0, 1}})->Args({4096, 128, 0})->Args({4096, 128, 1})
    ->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK(BM_backward<ref::flash_attention_backward>)->Name("ref_flash_backward")->ArgNames({"n", "d", "causal"})
    ->Args({512, 64, 1})->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_backward<opt::flash_attention_backward_v2>)->Name("opt_flash_backward_v2")->ArgNames({"n", "d", "causal"})
    ->Args({512, 64, 1})->Args({4096, 64, 1})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_backward<opt::flash_attention_backward_v3>)->Name("opt_flash_backward_v3")->ArgNames({"n", "d", "causal"})
    ->Args({512, 64, 1})->Args({4096, 64, 1})->Args({4096, 64, 0})->UseRealTime()->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  tvlab::opt::use_the_best_blas_kernel(argv);  // timings against a fallback kernel would mislead
  benchmark::Initialize(&argc, argv);
  if (tvlab::cuda::device_available()) {
    for (auto* b : {benchmark::RegisterBenchmark("cuda_flash_tiled", BM_cuda_flash),
                    benchmark::RegisterBenchmark("cuda_flash_tensor_core_fp16", BM_cuda_tensor_core_fp16),
                    benchmark::RegisterBenchmark("cuda_flash_tensor_core_bf16", BM_cuda_tensor_core_bf16),
                    benchmark::RegisterBenchmark("cuda_unfused_cublas", BM_cuda_unfused)})
      b->ArgNames({"n", "d", "causal"})->ArgsProduct({{1024, 4096, 16384}, {64, 128}, {0, 1}})->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("cuda_flash_backward", BM_cuda_backward)->ArgNames({"n", "d", "causal"})
        ->ArgsProduct({{1024, 4096}, {64}, {0, 1}})->UseManualTime()->Unit(benchmark::kMillisecond);
  }
  benchmark::AddCustomContext("cuda", tvlab::cuda::device_description());
  benchmark::AddCustomContext("openblas_kernel", tvlab::opt::blas_core_name());
  benchmark::AddCustomContext("heads", "8");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
