// Chapter 02 benchmarks: applying RoPE (memory-bound: GB/s against an in-place scaling pass and a
// memcpy measured in the same run) and attention with RoPE and ALiBi inside (GFLOP/s against
// OpenBLAS SGEMM), for every backend of the chapter's registry (`<backend>_apply_rope`,
// `<backend>_attention`, `<backend>_rope_attention`), plus RoPE in place with a prebuilt cache
// (`opt_apply_rope_inplace`) and the CUDA RoPE kernel on device pointers.
//
//   build/default/chapters/bench_02_position_encoding --benchmark_counters_tabular=true

#include <cmath>

#include "../common/bench_attention.hpp"
#include "../common/bench_cuda.hpp"
#include "../common/bench_support.hpp"
#include "backends.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/core/xt.hpp"
#include "tvlab/cuda/rope_device.hpp"
#include "tvlab/opt/rope.hpp"

namespace tvlab::bench {
namespace {

using ch02::Backend;
using Benchmark = benchmark::internal::Benchmark;
constexpr std::size_t kRopeHeadDim = 128;

const Backend& reference() { return reference_backend(ch02::backends()); }

RopeFrequencies llama_frequencies(std::size_t head_dim) {
  RopeConfig cfg;
  cfg.head_dim = static_cast<int>(head_dim);
  cfg.rope_theta = 500000;
  cfg.max_position_embeddings = 8192;
  return reference().rope_frequencies(cfg, 0);
}

// RoPE traffic (compared with stream_scale_inplace, the same bytes): read x and write it,
// 2 * heads * seq * d * 4 bytes (the cos/sin cache is seq * d floats, reused by every head, and
// stays in cache).
double rope_bytes(std::size_t heads, std::size_t seq) {
  return 2.0 * static_cast<double>(heads * seq * kRopeHeadDim * sizeof(float));
}

// Each output is x cos - x' sin, a two-term sum with terms at most max|x|:
// atol = reduction_rtol(2) max|x|, rtol = reduction_rtol(2).
Tolerance rope_tolerance(const Tensor3& x) {
  return {reduction_rtol(2) * static_cast<double>(xt::amax(xt::abs(x))()), reduction_rtol(2)};
}

struct RopeInputs {
  std::size_t heads, seq;
  RopeLayout layout;
  Tensor3 x;
  RopeFrequencies freqs = llama_frequencies(kRopeHeadDim);
  explicit RopeInputs(const benchmark::State& state)
      : heads(static_cast<std::size_t>(state.range(0))),
        seq(static_cast<std::size_t>(state.range(1))),
        layout(state.range(2) ? RopeLayout::interleaved : RopeLayout::half_split),
        x(Rng(1).normal_tensor(heads, seq, kRopeHeadDim)) {}
  Tensor3 expected() const { return reference().apply_rope(x, freqs, layout, 0); }
};

// args: heads, seq, interleaved. The registry's function returns a rotated copy.
void apply_rope(benchmark::State& state, const Backend& backend) {
  const RopeInputs in(state);
  auto run = [&] { return backend.apply_rope(in.x, in.freqs, in.layout, 0); };
  if (!validate(state, run(), in.expected(), rope_tolerance(in.x))) return;
  for (auto _ : state) benchmark::DoNotOptimize(run());
  set_bytes(state, rope_bytes(in.heads, in.seq));
}

// Optimized, in place with a prebuilt cache (what a model does: the cache is built once).
void opt_apply_rope_inplace(benchmark::State& state) {
  const RopeInputs in(state);
  const opt::RopeCache cache = opt::make_rope_cache(in.freqs, 0, static_cast<long long>(in.seq));
  Tensor3 x = in.x;
  opt::apply_rope_inplace(x, cache, in.layout, 0);
  if (!validate(state, x, in.expected(), rope_tolerance(in.x))) return;
  // Rotating back and forth would need the inverse; rotating the same buffer repeatedly is the
  // same work (each call reads and writes every element once).
  for (auto _ : state) {
    opt::apply_rope_inplace(x, cache, in.layout, 0);
    benchmark::DoNotOptimize(x.data());
  }
  set_bytes(state, rope_bytes(in.heads, in.seq));
}

// The CUDA kernel on device pointers, in place (no host-device copies), CUDA events.
void cuda_apply_rope_device(benchmark::State& state) {
  const RopeInputs in(state);
  const bool interleaved = in.layout == RopeLayout::interleaved;
  const opt::RopeCache cache = opt::make_rope_cache(in.freqs, 0, static_cast<long long>(in.seq));
  cuda::DeviceBuffer<float> x = to_device(in.x), c(cache.cos.data(), cache.cos.size()), s(cache.sin.data(), cache.sin.size());
  auto rotate = [&] {
    cuda::device::apply_rope_inplace(x.get(), in.heads * in.seq, in.seq, kRopeHeadDim, cache.pairs, c.get(), s.get(),
                                     interleaved);
  };
  rotate();
  if (!validate(state, to_host(x, in.heads, in.seq, kRopeHeadDim), in.expected(), rope_tolerance(in.x))) return;
  time_on_device(state, rotate);
  set_bytes(state, rope_bytes(in.heads, in.seq));
}

// Causal attention, 8 heads, d = 64. Attention FLOPs: 4 n^2 d per head (QK^T and PV), halved
// for the causal mask.
constexpr std::size_t kHeads = 8, kHeadDim = 64;
const double kScale = 1 / std::sqrt(static_cast<double>(kHeadDim));

double attention_flops(std::size_t n) { return 4.0 * static_cast<double>(kHeads * n * n * kHeadDim) / 2; }

enum class Positions { none, alibi, rope_before };

struct AttentionInputs {
  Tensor3 q, k, v;
  AttentionConfig cfg;
  AttentionRope rope{llama_frequencies(kHeadDim), RopeLayout::half_split, 0};
  double max_abs_bias = 0;
  AttentionInputs(std::size_t n, Positions positions) {
    Rng rng(2);
    q = rng.normal_tensor(kHeads, n, kHeadDim);
    k = rng.normal_tensor(kHeads, n, kHeadDim);
    v = rng.normal_tensor(kHeads, n, kHeadDim);
    cfg.mask.causal = true;
    if (positions == Positions::alibi) {
      cfg.mask.alibi_slopes = ref::alibi_slopes(static_cast<int>(kHeads));
      max_abs_bias = xt::amax(*cfg.mask.alibi_slopes)() * static_cast<double>(n - 1);
    }
  }
  // The tolerance of float attention (attention_tolerance with ALiBi's largest bias in the score
  // magnitude, reduction_rtol(max(d, n))); RoPE rotates pairs, so it keeps |q_i| and |k_j|.
  Tolerance tolerance() const { return attention_output_tolerance(q, k, v, kScale, max_abs_bias); }
  Tensor3 attention_rows(const Tensor3& q_rows) const { return reference().attention(q_rows, k, v, cfg); }
  Tensor3 rope_attention_rows(const Tensor3& q_rows) const { return reference().rope_attention(q_rows, k, v, rope, cfg); }
};

// args: n, positions (0 none, 1 ALiBi, 2 RoPE applied beforehand by opt::apply_rope, a pass of its
// own over q and k).
void attention(benchmark::State& state, const Backend& backend) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto positions = static_cast<Positions>(state.range(1));
  const AttentionInputs in(n, positions);
  auto run = [&] {
    if (positions != Positions::rope_before) return backend.attention(in.q, in.k, in.v, in.cfg);
    const RopeLayout layout = in.rope.layout;
    return backend.attention(opt::apply_rope(in.q, in.rope.freqs, layout, 0), opt::apply_rope(in.k, in.rope.freqs, layout, 0),
                             in.v, in.cfg);
  };
  const bool rotated = positions == Positions::rope_before;
  if (!validate_attention(state, run(), in.q,
                          [&](const Tensor3& q_rows) { return rotated ? in.rope_attention_rows(q_rows) : in.attention_rows(q_rows); },
                          in.tolerance()))
    return;
  for (auto _ : state) benchmark::DoNotOptimize(run());
  state.counters["GFLOP/s"] = gflops(attention_flops(n));
}

// RoPE inside attention: v1 rotates in a pass of its own, v2 inside its copies of q and k.
void rope_attention(benchmark::State& state, const Backend& backend) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const AttentionInputs in(n, Positions::none);
  auto run = [&] { return backend.rope_attention(in.q, in.k, in.v, in.rope, in.cfg); };
  if (!validate_attention(state, run(), in.q, [&](const Tensor3& q_rows) { return in.rope_attention_rows(q_rows); },
                          in.tolerance()))
    return;
  for (auto _ : state) benchmark::DoNotOptimize(run());
  state.counters["GFLOP/s"] = gflops(attention_flops(n));
}

bool fast(const Backend& backend) { return backend.kind == BackendKind::optimized || backend.kind == BackendKind::cuda; }

// 32 heads x 4096 positions x 128 floats = 64 MiB (fits in a large last-level cache); x 32768
// positions = 512 MiB.
void rope_shapes(Benchmark* b, const Backend& backend) {
  b->ArgNames({"heads", "seq", "interleaved"})->Args({32, 4096, 0});
  if (fast(backend)) b->Args({32, 4096, 1})->Args({32, 32768, 0});
}

// The reference loops at n = 256, the others at 1024.
void attention_shapes(Benchmark* b, const Backend& backend) {
  b->ArgNames({"n", "positions"})->ArgsProduct({{fast(backend) ? 1024 : 256}, {0, 1, 2}});
}

void rope_attention_shapes(Benchmark* b, const Backend& backend) { b->ArgNames({"n"})->Arg(fast(backend) ? 1024 : 256); }

}  // namespace

void register_benchmarks() {
  // 64 MiB fits in a large last-level cache (260 MiB on the machine the lesson reports), 512 MiB
  // does not: RoPE is compared with the in-place pass (and the memcpy) of the same size.
  add_memcpy({64 << 20, 512 << 20});
  add_stream_scale_inplace({64 << 20, 512 << 20});
  const auto& all = ch02::backends();
  add_backends(all, &Backend::apply_rope, "apply_rope", apply_rope, rope_shapes);
  add_benchmark("opt_apply_rope_inplace", opt_apply_rope_inplace, [](Benchmark* b) {
    b->ArgNames({"heads", "seq", "interleaved"})->Args({32, 4096, 0})->Args({32, 4096, 1})->Args({32, 32768, 0});
  });
  add_device_benchmark("cuda_apply_rope_device", cuda_apply_rope_device,
                       [](Benchmark* b) { b->ArgNames({"heads", "seq", "interleaved"})->Args({32, 4096, 0}); });
  // Attention is compute-bound: GFLOP/s against SGEMM.
  add_openblas_sgemm({1024});
  add_backends(all, &Backend::attention, "attention", attention, attention_shapes);
  add_backends(all, &Backend::rope_attention, "rope_attention", rope_attention, rope_attention_shapes);
  benchmark::AddCustomContext("positions", "0 none, 1 ALiBi, 2 RoPE applied beforehand as a separate pass");
}

}  // namespace tvlab::bench
