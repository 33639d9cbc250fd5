// Chapter 01 benchmarks: norms and activations (memory-bound: GB/s against a memcpy and a
// threaded copy measured in the same run) and the SwiGLU FFN (compute-bound: GFLOP/s against
// OpenBLAS SGEMM), for every backend of the chapter's registry (`<backend>_layer_norm`, ...), plus
// the optimized norms writing into a preallocated output (`opt_layer_norm_into`) and the CUDA
// RMSNorm kernel on device pointers.
//
//   build/default/chapters/bench_01_normalization --benchmark_counters_tabular=true

#include <algorithm>
#include <cmath>

#include "../common/bench_cuda.hpp"
#include "../common/bench_support.hpp"
#include "backends.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/core/xt.hpp"
#include "tvlab/cuda/normalization_device.hpp"
#include "tvlab/opt/normalization.hpp"

namespace tvlab::bench {
namespace {

using ch01::Backend;
using Benchmark = benchmark::internal::Benchmark;
constexpr double kLayerNormEps = 1e-5, kRmsNormEps = 1e-6;

const Backend& reference() { return reference_backend(ch01::backends()); }

// Norm traffic: read x and write y (gamma/beta are d floats, negligible): 2 * tokens * d * 4 bytes.
double norm_bytes(std::size_t tokens, std::size_t d) { return 2.0 * static_cast<double>(tokens * d * sizeof(float)); }

struct NormInputs {
  Tensor2 x;
  Tensor1 gamma, beta;
  NormInputs(std::size_t tokens, std::size_t d) {
    Rng rng(1);
    x = rng.normal_matrix(tokens, d);
    gamma = rng.normal_vector(d, 1, 0.1);
    beta = rng.normal_vector(d, 0, 0.1);
  }
  // As in the tests: the row reductions carry ~eps sqrt(d) relative error, amplified by the row's
  // condition number max|x| / sigma: atol = reduction_rtol(d) (1 + cond) max|gamma| + 1e-6,
  // rtol = reduction_rtol(d).
  Tolerance tolerance(bool centred) const {
    const std::size_t d = x.shape()[1];
    double cond = 1.0;
    for (std::size_t t = 0; t < x.shape()[0]; ++t) {
      double mean = 0.0, ms = 0.0, largest = 0.0;
      if (centred)
        for (std::size_t j = 0; j < d; ++j) mean += x(t, j) / static_cast<double>(d);
      for (std::size_t j = 0; j < d; ++j) {
        ms += (x(t, j) - mean) * (x(t, j) - mean) / static_cast<double>(d);
        largest = std::max(largest, std::abs(x(t, j) - mean));
      }
      if (ms > 0) cond = std::max(cond, largest / std::sqrt(ms));
    }
    const double rtol = reduction_rtol(d);
    return {rtol * (1.0 + cond) * static_cast<double>(xt::amax(xt::abs(gamma))()) + 1e-6, rtol};
  }
};

// The registry's functions return a fresh tensor: its allocation is part of their cost.
void layer_norm(benchmark::State& state, const Backend& backend) {
  const auto tokens = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const NormInputs in(tokens, d);
  auto run = [&] { return backend.layer_norm(in.x, in.gamma, in.beta, kLayerNormEps); };
  if (!validate(state, run(), reference().layer_norm(in.x, in.gamma, in.beta, kLayerNormEps), in.tolerance(true))) return;
  for (auto _ : state) benchmark::DoNotOptimize(run());
  set_bytes(state, norm_bytes(tokens, d));
}

void rms_norm(benchmark::State& state, const Backend& backend) {
  const auto tokens = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const NormInputs in(tokens, d);
  auto run = [&] { return backend.rms_norm(in.x, in.gamma, kRmsNormEps); };
  if (!validate(state, run(), reference().rms_norm(in.x, in.gamma, kRmsNormEps), in.tolerance(false))) return;
  for (auto _ : state) benchmark::DoNotOptimize(run());
  set_bytes(state, norm_bytes(tokens, d));
}

// The optimized norms writing into a preallocated output, so the time is the kernel's (see
// opt::layer_norm_into): what the lesson compares with the copy limit.
void opt_norm_into(benchmark::State& state, bool centred) {
  const auto tokens = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const NormInputs in(tokens, d);
  Tensor2 y = xt::zeros<float>({tokens, d});
  auto run = [&] {
    if (centred)
      opt::layer_norm_into(in.x, in.gamma, in.beta, kLayerNormEps, y);
    else
      opt::rms_norm_into(in.x, in.gamma, kRmsNormEps, y);
  };
  run();
  const Tensor2 expected = centred ? reference().layer_norm(in.x, in.gamma, in.beta, kLayerNormEps)
                                   : reference().rms_norm(in.x, in.gamma, kRmsNormEps);
  if (!validate(state, y, expected, in.tolerance(centred))) return;
  for (auto _ : state) {
    run();
    benchmark::DoNotOptimize(y.data());
  }
  set_bytes(state, norm_bytes(tokens, d));
}

// Elementwise: a few roundings of a short formula per element: atol 2e-6, rtol = reduction_rtol(1)
// (10 eps).
template <ch01::Unary Backend::*Activation>
void activation(benchmark::State& state, const Backend& backend) {
  const auto n = static_cast<std::size_t>(state.range(0));
  Rng rng(2);
  const Tensor2 x = rng.normal_matrix(n, 1024, 0, 2);
  if (!validate(state, (backend.*Activation)(x), (reference().*Activation)(x), {2e-6, reduction_rtol(1)})) return;
  for (auto _ : state) benchmark::DoNotOptimize((backend.*Activation)(x));
  set_bytes(state, 2.0 * static_cast<double>(x.size() * sizeof(float)));
}

// SwiGLU FFN: three [tokens, d] x [d, d_ff]-sized products = 6 tokens d d_ff FLOPs. The reference
// checks the first 64 tokens (each token's output depends on that token alone): two chained
// reductions, rtol = 2 (reduction_rtol(d) + reduction_rtol(d_ff)), atol = rtol max(1, max|y|), as in
// the tests.
void ffn_swiglu(benchmark::State& state, const Backend& backend) {
  const auto tokens = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const std::size_t d_ff = 8 * d / 3 / 64 * 64, checked = std::min<std::size_t>(tokens, 64);
  Rng rng(3);
  const double s = 1 / std::sqrt(static_cast<double>(d));
  const SwigluWeights w{rng.normal_matrix(d, d_ff, 0, s), rng.normal_matrix(d, d_ff, 0, s), rng.normal_matrix(d_ff, d, 0, s)};
  const Tensor2 x = rng.normal_matrix(tokens, d);
  const Tensor2 expected = reference().ffn_swiglu(xt::view(x, xt::range(0, checked), xt::all()), w);
  const Tensor2 got = xt::view(backend.ffn_swiglu(x, w), xt::range(0, checked), xt::all());
  const double rtol = 2 * (reduction_rtol(d) + reduction_rtol(d_ff));
  if (!validate(state, got, expected, {rtol * std::max(1.0, static_cast<double>(xt::amax(xt::abs(expected))())), rtol}))
    return;
  for (auto _ : state) benchmark::DoNotOptimize(backend.ffn_swiglu(x, w));
  state.counters["GFLOP/s"] = gflops(6.0 * static_cast<double>(tokens * d * d_ff));
}

// The CUDA RMSNorm kernel on device pointers (no host-device copies), CUDA events.
void cuda_rms_norm_device(benchmark::State& state) {
  const auto tokens = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const NormInputs in(tokens, d);
  cuda::DeviceBuffer<float> x(in.x.data(), in.x.size()), g(in.gamma.data(), d), y(tokens * d);
  const cuda::device::NormArgs args{x.get(), g.get(), nullptr, y.get(), tokens, d, kRmsNormEps};
  cuda::device::rms_norm_forward(args);
  Tensor2 got = xt::zeros<float>({tokens, d});
  y.download(got.data());
  if (!validate(state, got, reference().rms_norm(in.x, in.gamma, kRmsNormEps), in.tolerance(false))) return;
  time_on_device(state, [&] { cuda::device::rms_norm_forward(args); });
  set_bytes(state, norm_bytes(tokens, d));
}

// The sizes: 4096 x 4096 (64 MiB, in a large last-level cache) for every backend, 16384 x 8192
// (512 MiB, in memory) for the optimized and CUDA ones.
void norm_shapes(Benchmark* b, const Backend& backend) {
  b->Args({4096, 4096});
  if (backend.kind == BackendKind::optimized || backend.kind == BackendKind::cuda) b->Args({16384, 8192});
}

void activation_shapes(Benchmark* b, const Backend&) { b->Arg(4096); }

void ffn_shapes(Benchmark* b, const Backend& backend) {
  b->Args({64, 512});
  if (backend.kind == BackendKind::optimized || backend.kind == BackendKind::cuda) b->Args({512, 1024});
}

}  // namespace

void register_benchmarks() {
  // 64 MiB fits in a large last-level cache (260 MiB on the machine the lesson reports), 512 MiB
  // does not: the norms are compared with a threaded stream over the same bytes (and memcpy).
  add_memcpy({64 << 20, 512 << 20});
  add_stream_scale({64 << 20, 512 << 20});
  const auto& all = ch01::backends();
  add_backends(all, &Backend::layer_norm, "layer_norm", layer_norm, norm_shapes);
  add_backends(all, &Backend::rms_norm, "rms_norm", rms_norm, norm_shapes);
  const Shapes into_shapes = [](Benchmark* b) { b->Args({4096, 4096})->Args({16384, 8192}); };
  add_benchmark("opt_layer_norm_into", [](benchmark::State& state) { opt_norm_into(state, true); }, into_shapes);
  add_benchmark("opt_rms_norm_into", [](benchmark::State& state) { opt_norm_into(state, false); }, into_shapes);
  add_backends(all, &Backend::gelu, "gelu", activation<&Backend::gelu>, activation_shapes);
  add_backends(all, &Backend::silu, "silu", activation<&Backend::silu>, activation_shapes);
  add_device_benchmark("cuda_rms_norm_device", cuda_rms_norm_device, [](Benchmark* b) { b->Args({16384, 4096}); });
  // The FFN is compute-bound: GFLOP/s against SGEMM.
  add_openblas_sgemm({1024});
  add_backends(all, &Backend::ffn_swiglu, "ffn_swiglu", ffn_swiglu, ffn_shapes);
}

}  // namespace tvlab::bench
