// Chapter 00 benchmarks: softmax and attention for every backend of the chapter's registry
// (`<backend>_softmax`, `<backend>_attention`), against the machine's limits measured in the same
// run (OpenBLAS SGEMM GFLOP/s, memcpy GB/s), and the CUDA kernel on device pointers next to cuBLAS
// doing the same FLOPs.
//
//   build/default/chapters/bench_00_attention_basics --benchmark_counters_tabular=true
//
// Attention FLOPs: 4 n^2 d per head (QK^T and PV, 2 n^2 d each); causal masking is not skipped
// here (the unfused algorithm computes the full matrix), so the count is the same.

#include <cmath>

#include "../common/bench_attention.hpp"
#include "../common/bench_cuda.hpp"
#include "../common/bench_memory.hpp"
#include "../common/bench_support.hpp"
#include "backends.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/core/xt.hpp"
#include "tvlab/cuda/attention_device.hpp"
#include "tvlab/cuda/blas.hpp"
#include "tvlab/opt/attention.hpp"

namespace tvlab::bench {
namespace {

using ch00::Backend;
using Benchmark = benchmark::internal::Benchmark;
constexpr std::size_t kHeads = 8, kHeadDim = 64;
const double kScale = 1 / std::sqrt(static_cast<double>(kHeadDim));

const Backend& reference() { return reference_backend(ch00::backends()); }

struct AttentionInputs {
  Tensor3 q, k, v;
  explicit AttentionInputs(std::size_t n) {
    Rng rng(1);
    q = rng.normal_tensor(kHeads, n, kHeadDim);
    k = rng.normal_tensor(kHeads, n, kHeadDim);
    v = rng.normal_tensor(kHeads, n, kHeadDim);
  }
  Tolerance tolerance() const { return attention_output_tolerance(q, k, v, kScale); }
  // The reference's output for the last rows of q (see bench_attention.hpp).
  Tensor3 reference_rows(const Tensor3& q_rows) const { return reference().sdpa(q_rows, k, v, {}); }
};

double attention_flops(std::size_t n) { return 4.0 * static_cast<double>(n) * n * kHeadDim * kHeads; }

void softmax(benchmark::State& state, const Backend& backend) {
  const auto rows = static_cast<std::size_t>(state.range(0)), cols = static_cast<std::size_t>(state.range(1));
  Rng rng(2);
  const Tensor2 x = rng.normal_matrix(rows, cols, 0, 3);
  // A row reduction of length cols in float: rtol = reduction_rtol(cols), as in the tests.
  if (!validate(state, backend.softmax(x), reference().softmax(x), {2e-6, reduction_rtol(cols)})) return;
  for (auto _ : state) benchmark::DoNotOptimize(backend.softmax(x));
  set_bytes(state, 2.0 * static_cast<double>(rows * cols * sizeof(float)));
}

// extra_MiB: the heap a call allocates beyond its output, on the CPU: one row of scores per
// thread (the reference: doubles; v1: floats) or a whole [n, n] float matrix per thread (v2).
void attention(benchmark::State& state, const Backend& backend) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const AttentionInputs in(n);
  // The tolerance of float attention (attention_tolerance, reduction_rtol(max(d, n))).
  if (!validate_attention(state, backend.sdpa(in.q, in.k, in.v, {}), in.q,
                          [&](const Tensor3& q_rows) { return in.reference_rows(q_rows); }, in.tolerance()))
    return;
  if (!backend.caps.needs_device)
    report_extra_memory(state, [&] { return backend.sdpa(in.q, in.k, in.v, {}); },
                        static_cast<double>(in.q.size() * sizeof(float)));
  for (auto _ : state) benchmark::DoNotOptimize(backend.sdpa(in.q, in.k, in.v, {}));
  state.counters["GFLOP/s"] = gflops(attention_flops(n));
}

// The CUDA kernel on device pointers: two cuBLAS batched SGEMMs around a softmax kernel, without
// the host-device copies that `cuda_attention` includes. TFLOP/s.
void cuda_attention_device(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const AttentionInputs in(n);
  const auto q = to_device(in.q), k = to_device(in.k), v = to_device(in.v);
  cuda::DeviceBuffer<float> out(in.q.size()), scores(kHeads * n * n);
  const auto args = device_attention_args(q.get(), k.get(), v.get(), out.get(), scores.get(), kHeads, n, kHeadDim, false);
  cuda::device::scaled_dot_product_attention(args);
  if (!validate_attention(state, to_host(out, kHeads, n, kHeadDim), in.q,
                          [&](const Tensor3& q_rows) { return in.reference_rows(q_rows); }, in.tolerance()))
    return;
  time_on_device(state, [&] { cuda::device::scaled_dot_product_attention(args); });
  state.counters["TFLOP/s"] = tflops(attention_flops(n));
}

// cuBLAS SGEMM of the same FLOPs as attention's two GEMMs ([h n, d] x [d, n], twice): the vendor
// library doing the matrix work alone; the gap to cuda_attention_device is the softmax and its
// traffic. Checked on the last rows of the product against double sums.
void cuda_cublas_same_flops(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::size_t m = kHeads * n, k = kHeadDim, rows = validated_rows(m), first = m - rows;
  Rng rng(3);
  const Tensor2 a = rng.normal_matrix(m, k), b = rng.normal_matrix(k, n);
  cuda::DeviceBuffer<float> a_dev(a.data(), a.size()), b_dev(b.data(), b.size()), c_dev(m * n);
  cuda::device::sgemm(m, n, k, a_dev.get(), b_dev.get(), false, c_dev.get());
  Tensor2 c = xt::zeros<float>({m, n});
  c_dev.download(c.data());
  // A reduction of length k: rtol = reduction_rtol(k), atol = rtol max_ij sum_l |a_il b_lj|.
  Tensor2 expected = xt::zeros<float>({rows, n});
  double magnitude = 0;
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double sum = 0, abs_sum = 0;
      for (std::size_t l = 0; l < k; ++l) {
        sum += static_cast<double>(a(first + i, l)) * b(l, j);
        abs_sum += std::abs(static_cast<double>(a(first + i, l)) * b(l, j));
      }
      expected(i, j) = static_cast<float>(sum);
      magnitude = std::max(magnitude, abs_sum);
    }
  const Tensor2 got = xt::view(c, xt::range(first, m), xt::all());
  if (!validate(state, got, expected, {reduction_rtol(k) * magnitude, reduction_rtol(k)})) return;
  time_on_device(state, [&] {
    cuda::device::sgemm(m, n, k, a_dev.get(), b_dev.get(), false, c_dev.get());
    cuda::device::sgemm(m, n, k, a_dev.get(), b_dev.get(), false, c_dev.get());
  });
  state.counters["TFLOP/s"] = tflops(attention_flops(n));
}

// 000 L155: "h heads take about the time of one large head". The optimized attention at the same n
// and d = 512, as h = 8 heads of d_k = 64 (args {n, 8}) or one head of d_k = 512 ({n, 1}): the
// same 4 n^2 d FLOPs of matrix products, h times the scores and exponentials. Validated against
// the reference first, like every attention benchmark.
constexpr std::size_t kModelDim = 512;

void heads_vs_one_wide_head(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0)), heads = static_cast<std::size_t>(state.range(1));
  const std::size_t head_dim = kModelDim / heads;
  Rng rng(4);
  const Tensor3 q = rng.normal_tensor(heads, n, head_dim), k = rng.normal_tensor(heads, n, head_dim),
                v = rng.normal_tensor(heads, n, head_dim);
  const Tolerance tol = attention_output_tolerance(q, k, v, 1 / std::sqrt(static_cast<double>(head_dim)));
  if (!validate_attention(state, opt::scaled_dot_product_attention(q, k, v), q,
                          [&](const Tensor3& q_rows) { return reference().sdpa(q_rows, k, v, {}); }, tol))
    return;
  for (auto _ : state) benchmark::DoNotOptimize(opt::scaled_dot_product_attention(q, k, v));
  state.counters["GFLOP/s"] = gflops(4.0 * static_cast<double>(n) * n * kModelDim);
  state.counters["heads"] = static_cast<double>(heads);
}

// The sizes each backend is timed at: the reference loops at the small sizes, the optimized
// versions (each step of the lesson, and the headline `opt`, which is the last step) up to
// 2048, the GPU at long sequences, the student's code once.
void softmax_shapes(Benchmark* b, const Backend& backend) {
  b->Args({1024, 1024})->Unit(benchmark::kMicrosecond);
  if (backend.kind == BackendKind::optimized || backend.kind == BackendKind::cuda) b->Args({4096, 4096});
}

void attention_shapes(Benchmark* b, const Backend& backend) {
  switch (backend.kind) {
    case BackendKind::reference: b->Arg(128)->Arg(256)->Arg(512); break;
    case BackendKind::optimized: b->Arg(128)->Arg(256)->Arg(512)->Arg(1024)->Arg(2048); break;
    case BackendKind::cuda: b->Arg(1024)->Arg(4096)->Arg(8192); break;
    case BackendKind::student: b->Arg(128); break;
  }
}

void cuda_shapes(Benchmark* b) { b->Arg(1024)->Arg(4096)->Arg(8192); }

}  // namespace

void register_benchmarks() {
  add_openblas_sgemm({512, 1024});
  add_memcpy({64 << 20});
  add_backends(ch00::backends(), &Backend::softmax, "softmax", softmax, softmax_shapes);
  // The registry's `sdpa`, timed as `<backend>_attention`: ref_attention, opt_v1_attention, ...
  add_backends(ch00::backends(), &Backend::sdpa, "attention", attention, attention_shapes);
  add_benchmark("heads_vs_one_wide_head", heads_vs_one_wide_head, [](Benchmark* b) {
    for (std::int64_t n : {512, 1024, 2048}) b->Args({n, 8})->Args({n, 1});
  });
  add_device_benchmark("cuda_attention_device", cuda_attention_device, cuda_shapes);
  add_device_benchmark("cuda_cublas_same_flops", cuda_cublas_same_flops, cuda_shapes);
}

}  // namespace tvlab::bench
