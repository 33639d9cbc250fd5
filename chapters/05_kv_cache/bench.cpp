// Chapter 05's benchmarks: one decode step (one generated token, 32 query heads, d = d_v = 128)
// over a KV cache of 1K to 128K positions, for MHA (g = 32), GQA (g = 8) and MQA (g = 1). Decoding
// reads the whole cache once per token for about 4 flops per float, so it is limited by memory
// bandwidth: each version reports the cache bytes read per token, GB/s of them, and tokens/s, next
// to a threaded copy of the GQA cache's size measured in the same run (stream_scale, read + write
// counted). Every version is validated against the double reference before it is timed.
//
// The chapter's registry (backends.*) is still the template's: these benchmarks are registered
// directly with add_benchmark, until the registry takes the decode step over.
//
//   build/default/chapters/bench_05_kv_cache --benchmark_counters_tabular=true

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../common/bench_support.hpp"
#include "tvlab/core/compare.hpp"
#include "tvlab/opt/gqa_decode.hpp"
#include "tvlab/ref/gqa_decode.hpp"

namespace tvlab::bench {
namespace {

constexpr std::size_t kHeads = 32, kHeadDim = 128;
// The reference (double loops) is validated against on the first 4096 positions of a longer cache.
constexpr std::size_t kValidatedLength = 4096;

// One cache at a time (a 128K MHA cache is 4 GiB): the versions of one shape share it, the next
// shape frees it before allocating its own.
struct DecodeInputs {
  std::size_t kv_heads = 0, length = 0;
  Tensor2 q;
  Tensor3 k, v;
};
DecodeInputs& inputs_for(std::size_t kv_heads, std::size_t length) {
  static DecodeInputs held;
  if (held.kv_heads == kv_heads && held.length == length) return held;
  held = DecodeInputs{};  // free the previous cache first
  // Uniform values in [-1, 1) from a 64-bit xorshift: the normal generator would take seconds per GiB.
  auto fill = [state = std::uint64_t{0x9e3779b97f4a7c15}](float* x, std::size_t n) mutable {
    for (std::size_t i = 0; i < n; ++i) {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      x[i] = static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-52 - 1.0);
    }
  };
  held.q = Tensor2::from_shape({kHeads, kHeadDim});
  held.k = Tensor3::from_shape({kv_heads, length, kHeadDim});
  held.v = Tensor3::from_shape({kv_heads, length, kHeadDim});
  fill(held.q.data(), held.q.size());
  fill(held.k.data(), held.k.size());
  fill(held.v.data(), held.v.size());
  held.kv_heads = kv_heads;
  held.length = length;
  return held;
}

using DecodeFn = std::function<ref::GqaDecodeOutput(const Tensor2&, const Tensor3&, const Tensor3&, std::size_t)>;

void decode(benchmark::State& state, const DecodeFn& fn) {
  const auto kv_heads = static_cast<std::size_t>(state.range(0)), length = static_cast<std::size_t>(state.range(1));
  const DecodeInputs& in = inputs_for(kv_heads, length);
  // Against the double reference on the first min(length, 4096) positions: an attention over n
  // keys in float, rtol = 2 reduction_rtol(max(d, n)) and atol = attention_tolerance with the
  // score bound M <= scale d max|q| max|k| = sqrt(d) for values in [-1, 1).
  const std::size_t n = std::min(length, kValidatedLength);
  const double rtol = 2 * reduction_rtol(std::max(kHeadDim, n));
  const Tolerance tol{attention_tolerance(kHeadDim, n, std::sqrt(static_cast<double>(kHeadDim)), 1.0), rtol};
  if (!validate(state, fn(in.q, in.k, in.v, n).out, ref::gqa_decode_attention(in.q, in.k, in.v, n).out, tol)) return;
  for (auto _ : state) benchmark::DoNotOptimize(fn(in.q, in.k, in.v, length));
  // The cache bytes one token reads: g kv heads x length positions x (d + d_v) floats.
  const double cache_bytes = static_cast<double>(kv_heads * length * 2 * kHeadDim * sizeof(float));
  set_bytes(state, cache_bytes);
  state.counters["cache_MiB"] = cache_bytes / (1 << 20);
  state.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

void register_benchmarks() {
  // The limit: a threaded copy of the GQA cache's size at 32K (256 MiB read + 256 MiB written),
  // far out of every cache level.
  add_stream_scale({std::int64_t{256} << 20});
  const std::vector<std::pair<const char*, DecodeFn>> versions{
      {"v1", [](const Tensor2& q, const Tensor3& k, const Tensor3& v, std::size_t n) { return opt::gqa_decode_attention_v1(q, k, v, n); }},
      {"v2", [](const Tensor2& q, const Tensor3& k, const Tensor3& v, std::size_t n) { return opt::gqa_decode_attention_v2(q, k, v, n); }},
      {"best", [](const Tensor2& q, const Tensor3& k, const Tensor3& v, std::size_t n) { return opt::gqa_decode_attention(q, k, v, n); }},
  };
  // Shape by shape (the cache is shared by the versions of a shape): MHA, GQA, MQA at each context.
  for (std::int64_t length : {1024, 4096, 16384, 32768, 131072})
    for (std::int64_t kv_heads : {32, 8, 1})
      for (const auto& [name, fn] : versions)
        add_benchmark(std::string("gqa_decode_") + name, [fn](benchmark::State& state) { decode(state, fn); },
                      [=](benchmark::internal::Benchmark* b) {
                        b->Args({kv_heads, length})->ArgNames({"g", "length"});
                      });
}

}  // namespace tvlab::bench
