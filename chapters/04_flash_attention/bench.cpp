// Chapter 04 benchmarks: flash attention's forward and backward passes for every backend of the
// chapter's registry (`<backend>_flash_forward`, `<backend>_flash_backward`), against chapter 00's
// attention (SGEMM + softmax over the whole n x n score matrix, `ch00_sgemm_attention`), in GFLOP/s
// (4 n^2 d per head, halved when causal) next to OpenBLAS SGEMM measured in the same run, with the
// extra memory each CPU version allocates besides its output; and the CUDA kernels on device
// pointers against chapter 00's unfused cuBLAS path.
//
//   build/default/chapters/bench_04_flash_attention --benchmark_counters_tabular=true

#include <cmath>
#include <vector>

#include "../common/bench_attention.hpp"
#include "../common/bench_cuda.hpp"
#include "../common/bench_memory.hpp"
#include "../common/bench_support.hpp"
#include "backends.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/core/xt.hpp"
#include "tvlab/cuda/attention_device.hpp"
#include "tvlab/cuda/flash_attention_device.hpp"
#include "tvlab/opt/attention.hpp"
#include "tvlab/opt/flash_attention.hpp"

namespace tvlab::bench {
namespace {

using ch04::Backend;
using Benchmark = benchmark::internal::Benchmark;
constexpr std::size_t kHeads = 8;

const Backend& reference() { return reference_backend(ch04::backends()); }

double attention_flops(std::size_t n, std::size_t d, bool causal) {
  return 4.0 * static_cast<double>(kHeads * n * n * d) / (causal ? 2.0 : 1.0);
}

// args: n, d, causal.
struct Inputs {
  std::size_t n, d;
  bool causal;
  Tensor3 q, k, v;
  FlashConfig cfg;
  explicit Inputs(const benchmark::State& state)
      : n(static_cast<std::size_t>(state.range(0))), d(static_cast<std::size_t>(state.range(1))), causal(state.range(2) != 0) {
    Rng rng(4);
    q = rng.normal_tensor(kHeads, n, d);
    k = rng.normal_tensor(kHeads, n, d);
    v = rng.normal_tensor(kHeads, n, d);
    cfg.mask.causal = causal;
  }
  float scale() const { return static_cast<float>(1 / std::sqrt(static_cast<double>(d))); }
  double flops() const { return attention_flops(n, d, causal); }
  // The tolerance of float attention (attention_tolerance, reduction_rtol(max(d, n))).
  Tolerance tolerance() const { return attention_output_tolerance(q, k, v, scale()); }
  // The reference's output for the last rows of q (see bench_attention.hpp), in `inputs`' format.
  Tensor3 reference_rows(const Tensor3& q_rows, FlashInputs inputs = FlashInputs::fp32) const {
    FlashConfig same = cfg;
    same.inputs = inputs;
    return reference().flash_forward(q_rows, k, v, same).out;
  }
  bool validate_output(benchmark::State& state, const Tensor3& out) const {
    return validate_attention(state, out, q, [&](const Tensor3& q_rows) { return reference_rows(q_rows); }, tolerance());
  }
};

void flash_forward(benchmark::State& state, const Backend& backend) {
  const Inputs in(state);
  auto run = [&] { return backend.flash_forward(in.q, in.k, in.v, in.cfg); };
  if (!in.validate_output(state, run().out)) return;
  if (!backend.caps.needs_device)  // O and the log-sum-exp are the output
    report_extra_memory(state, run, static_cast<double>(kHeads * in.n * (in.d + 1) * sizeof(float)));
  for (auto _ : state) benchmark::DoNotOptimize(run());
  state.counters["GFLOP/s"] = gflops(in.flops());
}

// Chapter 00's headline attention: S = QK^T and O = PV as SGEMMs around a softmax over the whole
// score matrix (one [n, n] buffer per thread).
void ch00_sgemm_attention(benchmark::State& state) {
  const Inputs in(state);
  AttentionConfig cfg;
  cfg.mask = in.cfg.mask;
  auto run = [&] { return opt::scaled_dot_product_attention(in.q, in.k, in.v, cfg); };
  if (!in.validate_output(state, run())) return;
  report_extra_memory(state, run, static_cast<double>(kHeads * in.n * in.d * sizeof(float)));
  for (auto _ : state) benchmark::DoNotOptimize(run());
  state.counters["GFLOP/s"] = gflops(in.flops());
}

// ------------------------------------------------------------------ backward

// Each gradient is a sum over up to n terms whose inputs (out, lse) carry float rounding, as in the
// tests: rtol = reduction_rtol(max(d, n)), atol = 10 rtol max(1, max|expected|) (cancellation in
// dS = P (dP - D) makes the relative error meaningless near zero).
bool validate_gradient(benchmark::State& state, const Tensor3& got, const Tensor3& expected, const Inputs& in) {
  const double rtol = reduction_rtol(std::max(in.d, in.n));
  return validate(state, got, expected, {10 * rtol * std::max(1.0, static_cast<double>(xt::amax(xt::abs(expected))())), rtol});
}

// Checks the gradients against the reference's backward pass on the same out and lse. Beyond
// `validated_rows(n)` it recomputes two slices: dQ of the last query rows (those rows alone, with
// every key, as for the forward pass), and dK, dV of the first keys (those keys alone, with every
// query: the reference recomputes P_ij = exp(S_ij - L_i) from the saved L, which needs no other
// key; the causal rule aligned top-left keeps key j's index, and with n_q = n_k it is the same rule).
bool validate_backward(benchmark::State& state, const FlashGrads& got, const Inputs& in, const Tensor3& out,
                       const Tensor2& lse, const Tensor3& dout) {
  const auto& backward = reference().flash_backward;
  const std::size_t rows = validated_rows(in.n), first = in.n - rows;
  if (rows == in.n) {
    const FlashGrads want = backward(in.q, in.k, in.v, out, lse, dout, in.cfg);
    return validate_gradient(state, got.dq, want.dq, in) && validate_gradient(state, got.dk, want.dk, in) &&
           validate_gradient(state, got.dv, want.dv, in);
  }
  const FlashGrads last_queries = backward(rows_of(in.q, first, rows), in.k, in.v, rows_of(out, first, rows),
                                           rows_of(lse, first, rows), rows_of(dout, first, rows), in.cfg);
  FlashConfig top_left = in.cfg;
  top_left.mask.causal_align = CausalAlign::top_left;
  const FlashGrads first_keys = backward(in.q, rows_of(in.k, 0, rows), rows_of(in.v, 0, rows), out, lse, dout, top_left);
  return validate_gradient(state, rows_of(got.dq, first, rows), last_queries.dq, in) &&
         validate_gradient(state, rows_of(got.dk, 0, rows), first_keys.dk, in) &&
         validate_gradient(state, rows_of(got.dv, 0, rows), first_keys.dv, in);
}

// The backward pass from the optimized forward pass's output and log-sum-exp. FLOPs as
// FlashAttention counts them: 2.5 times the forward (five n x n x d products instead of two).
void flash_backward(benchmark::State& state, const Backend& backend) {
  const Inputs in(state);
  const FlashOutput fwd = opt::flash_attention_forward(in.q, in.k, in.v, in.cfg);
  const Tensor3 dout = Rng(6).normal_tensor(kHeads, in.n, in.d);
  auto run = [&] { return backend.flash_backward(in.q, in.k, in.v, fwd.out, fwd.lse, dout, in.cfg); };
  if (!validate_backward(state, run(), in, fwd.out, fwd.lse, dout)) return;
  for (auto _ : state) benchmark::DoNotOptimize(run());
  state.counters["GFLOP/s"] = gflops(2.5 * in.flops());
}

// ------------------------------------------------------------------ CUDA kernels on device pointers
// Timed with CUDA events and an L2 flush between repeats, in TFLOP/s: the tiled fp32 flash
// kernel, the tensor-core kernel (fp16, bf16) and the backward kernels, against chapter 00's
// unfused cuBLAS path (two batched SGEMMs around a softmax kernel over the n x n scores).

struct DeviceInputs {
  cuda::DeviceBuffer<float> q, k, v, out, lse;
  explicit DeviceInputs(const Inputs& in)
      : q(to_device(in.q)), k(to_device(in.k)), v(to_device(in.v)), out(in.q.size()), lse(kHeads * in.n) {}
  cuda::device::FlashArgs flash_args(const Inputs& in) const {
    return {q.get(), k.get(), v.get(), out.get(), lse.get(), kHeads, in.n, in.n, in.d, in.d, 64, 64, in.scale(), in.causal};
  }
};

void cuda_flash_tiled(benchmark::State& state) {
  const Inputs in(state);
  const DeviceInputs dev(in);
  const cuda::device::FlashArgs args = dev.flash_args(in);
  cuda::device::flash_forward_tiled(args);
  if (!in.validate_output(state, to_host(dev.out, kHeads, in.n, in.d))) return;
  time_on_device(state, [&] { cuda::device::flash_forward_tiled(args); });
  state.counters["TFLOP/s"] = tflops(in.flops());
}

void cuda_unfused_cublas(benchmark::State& state) {
  const Inputs in(state);
  const DeviceInputs dev(in);
  cuda::DeviceBuffer<float> scores(kHeads * in.n * in.n);
  const auto args =
      device_attention_args(dev.q.get(), dev.k.get(), dev.v.get(), dev.out.get(), scores.get(), kHeads, in.n, in.d, in.causal);
  cuda::device::scaled_dot_product_attention(args);
  if (!in.validate_output(state, to_host(dev.out, kHeads, in.n, in.d))) return;
  time_on_device(state, [&] { cuda::device::scaled_dot_product_attention(args); });
  state.counters["TFLOP/s"] = tflops(in.flops());
}

// The tensor-core kernel on fp16 or bf16 inputs (rounded once on the host, outside the timing),
// tiles of 64 x 64: the same FLOP count, so its TFLOP/s compare directly with the fp32 kernels'.
// It is checked against the reference's emulation of the same format: two roundings of a weight
// differ by at most 2u of it (u: the format's unit roundoff), so atol = max|v| (2u + n 2^-24 +
// rtol (2M + 1)), the last term attention_tolerance's, as in the tests.
void cuda_flash_tensor_core(benchmark::State& state, FlashInputs format) {
  const Inputs in(state);
  const std::vector<std::uint16_t> hq = to_16_bit_inputs(in.q, format), hk = to_16_bit_inputs(in.k, format),
                                   hv = to_16_bit_inputs(in.v, format);
  cuda::DeviceBuffer<std::uint16_t> q(hq.data(), hq.size()), k(hk.data(), hk.size()), v(hv.data(), hv.size());
  cuda::DeviceBuffer<float> out(in.q.size()), lse(kHeads * in.n);
  cuda::device::FlashTensorCoreArgs args;
  args.q = q.get();
  args.k = k.get();
  args.v = v.get();
  args.bf16 = format == FlashInputs::bf16;
  args.out = out.get();
  args.lse = lse.get();
  args.heads = kHeads;
  args.seq_q = args.seq_k = in.n;
  args.head_dim = args.head_dim_v = in.d;
  args.block_q = args.block_k = 64;
  args.scale = in.scale();
  args.causal = in.causal;
  cuda::device::flash_forward_tensor_core(args);
  const double unit_roundoff = format == FlashInputs::bf16 ? 0x1p-8 : 0x1p-11;
  Tolerance tol = in.tolerance();
  tol.atol += static_cast<double>(xt::amax(xt::abs(in.v))()) * (2 * unit_roundoff + static_cast<double>(in.n) * 0x1p-24);
  if (!validate_attention(state, to_host(out, kHeads, in.n, in.d), in.q,
                          [&](const Tensor3& q_rows) { return in.reference_rows(q_rows, format); }, tol))
    return;
  time_on_device(state, [&] { cuda::device::flash_forward_tensor_core(args); });
  state.counters["TFLOP/s"] = tflops(in.flops());
}

// The backward kernels on the tiled forward kernel's out and lse, FLOPs counted as FlashAttention
// does (2.5 times the forward's).
void cuda_flash_backward_device(benchmark::State& state) {
  const Inputs in(state);
  const DeviceInputs dev(in);
  const Tensor3 dout_host = Rng(5).normal_tensor(kHeads, in.n, in.d);
  cuda::DeviceBuffer<float> dout = to_device(dout_host), delta(kHeads * in.n), dq(in.q.size()), dk(in.k.size()),
                            dv(in.v.size());
  cuda::device::flash_forward_tiled(dev.flash_args(in));
  const cuda::device::FlashBackwardArgs args{dev.q.get(), dev.k.get(), dev.v.get(), dev.out.get(), dev.lse.get(),
                                             dout.get(), delta.get(), dq.get(), dk.get(), dv.get(), kHeads, in.n, in.n,
                                             in.d, in.d, 64, 64, in.scale(), in.causal};
  cuda::device::flash_backward(args);
  Tensor2 lse = xt::zeros<float>({kHeads, in.n});
  dev.lse.download(lse.data());
  const FlashGrads got{to_host(dq, kHeads, in.n, in.d), to_host(dk, kHeads, in.n, in.d), to_host(dv, kHeads, in.n, in.d)};
  if (!validate_backward(state, got, in, to_host(dev.out, kHeads, in.n, in.d), lse, dout_host)) return;
  time_on_device(state, [&] { cuda::device::flash_backward(args); });
  state.counters["TFLOP/s"] = tflops(2.5 * in.flops());
}

// ------------------------------------------------------------------ sizes

// The forward pass: the reference loops once at two small sizes; the lesson's last version (v3)
// over n = 512 ... 16384 and d = 64, 128, with and without the causal mask; v1 and v2 at 1024 and
// 4096; the headline `opt` (the last version under its lesson name) at the lab's sizes; the
// host-tensor CUDA entries (copies included) at 1024 and 4096.
void forward_shapes(Benchmark* b, const Backend& backend) {
  b->ArgNames({"n", "d", "causal"});
  switch (backend.kind) {
    case BackendKind::reference: b->Args({512, 64, 0})->Args({1024, 64, 1})->Iterations(1); return;
    case BackendKind::student: b->Args({512, 64, 0})->Iterations(1); return;
    case BackendKind::cuda: b->ArgsProduct({{1024, 4096}, {64, 128}, {0, 1}}); return;
    case BackendKind::optimized: break;
  }
  if (backend.name == "opt_v3")  // the grid scripts/flash_vs_pytorch.py compares with PyTorch
    b->ArgsProduct({{512, 1024, 2048, 4096, 8192, 16384}, {64, 128}, {0, 1}});
  else if (backend.name == "opt")
    b->ArgsProduct({{1024, 4096}, {64}, {0, 1}});
  else  // the earlier versions, next to it in the lesson's table
    b->ArgsProduct({{1024, 4096}, {64, 128}, {0, 1}});
}

// The backward pass: the reference once at 512 causal; v1 (element-by-element dot products) at
// 512; the others at 512 and 4096 causal, the last two versions (v3, v4) over n = 512 ... 4096 and
// d = 64, 128, with and without the mask.
void backward_shapes(Benchmark* b, const Backend& backend) {
  b->ArgNames({"n", "d", "causal"})->Args({512, 64, 1});
  if (backend.kind == BackendKind::reference) b->Iterations(1);
  if (backend.kind == BackendKind::cuda) b->ArgsProduct({{1024, 4096}, {64}, {0, 1}});
  if (backend.kind == BackendKind::optimized && backend.name != "opt_backward_v1") b->Args({4096, 64, 1});
  if (backend.name == "opt_backward_v3" || backend.name == "opt_backward_v4")  // v4: the grid of flash_vs_pytorch.py
    b->Args({4096, 64, 0})->ArgsProduct({{1024, 2048}, {64, 128}, {0, 1}})->Args({512, 64, 0})->Args({512, 128, 0})
        ->Args({512, 128, 1})->Args({4096, 128, 0})->Args({4096, 128, 1});
}

void cuda_shapes(Benchmark* b) { b->ArgNames({"n", "d", "causal"})->ArgsProduct({{1024, 4096, 16384}, {64, 128}, {0, 1}}); }

}  // namespace

void register_benchmarks() {
  add_openblas_sgemm({1024});
  const auto& all = ch04::backends();
  // The fp32 forward passes; the tensor-core kernel (16-bit inputs only) is timed below on its own.
  std::vector<Backend> fp32_forward;
  for (const auto& b : all)
    if (!b.limits.sixteen_bit_only) fp32_forward.push_back(b);
  add_backends(fp32_forward, &Backend::flash_forward, "flash_forward", flash_forward, forward_shapes);
  add_benchmark("ch00_sgemm_attention", ch00_sgemm_attention, [](Benchmark* b) {
    b->ArgNames({"n", "d", "causal"})->ArgsProduct({{512, 1024, 2048, 4096, 8192, 16384}, {64}, {0, 1}})->Args({4096, 128, 1});
  });
  add_backends(all, &Backend::flash_backward, "flash_backward", flash_backward, backward_shapes);
  add_device_benchmark("cuda_flash_tiled", cuda_flash_tiled, cuda_shapes);
  add_device_benchmark("cuda_flash_tensor_core_fp16",
                       [](benchmark::State& state) { cuda_flash_tensor_core(state, FlashInputs::fp16); }, cuda_shapes);
  add_device_benchmark("cuda_flash_tensor_core_bf16",
                       [](benchmark::State& state) { cuda_flash_tensor_core(state, FlashInputs::bf16); }, cuda_shapes);
  add_device_benchmark("cuda_unfused_cublas", cuda_unfused_cublas, cuda_shapes);
  add_device_benchmark("cuda_flash_backward_device", cuda_flash_backward_device,
                       [](Benchmark* b) { b->ArgNames({"n", "d", "causal"})->ArgsProduct({{1024, 4096}, {64}, {0, 1}}); });
  benchmark::AddCustomContext("heads", "8");
}

}  // namespace tvlab::bench
