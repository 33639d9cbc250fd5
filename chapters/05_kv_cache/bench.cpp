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
#include "tvlab/core/kv_bf16.hpp"
#include "tvlab/core/kv_quant.hpp"
#include "tvlab/opt/gqa_decode.hpp"
#include "tvlab/opt/kv_layout_decode.hpp"
#include "tvlab/opt/quantized_kv_decode.hpp"
#include "tvlab/ref/bf16_kv_decode.hpp"
#include "tvlab/ref/gqa_decode.hpp"
#include "tvlab/ref/quantized_kv_attention.hpp"

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

// ------------------------------------------------------------ quantized caches and KV layouts
//
// The GQA step (32 query heads, g = 8, d = 128) over the same cache stored in float, bf16, INT8
// per token, INT8 keys per channel (KIVI, groups of 32 tokens) with INT8 values per token, FP8
// E4M3 per token and INT4 per group of 32 channels (asymmetric), each dequantized inside the
// kernel (tvlab/opt/quantized_kv_decode.hpp); and the float cache laid out per head [g, n, d]
// against per token [n, g, d] (tvlab/opt/kv_layout_decode.hpp). Each reports the cache bytes it
// reads per generated token (codes + scales + minimums) as cache_MiB and per position as
// B/position, GB/s of them, and tokens/s.

constexpr std::size_t kGqaKvHeads = 8;

// A cache format of the comparison: its key and value specs, or bf16 (no spec).
struct CacheFormat {
  const char* name;
  bool bf16;
  KvQuantSpec key, value;
};
const std::vector<CacheFormat>& cache_formats() {
  static const std::vector<CacheFormat> all{
      {"bf16", true, {}, {}},
      {"int8_per_token", false, int8_per_token(kHeadDim), int8_per_token(kHeadDim)},
      {"int8_kivi", false, int8_per_channel(32), int8_per_token(kHeadDim)},
      {"fp8_e4m3", false, fp8_e4m3_per_token(kHeadDim), fp8_e4m3_per_token(kHeadDim)},
      {"int4_group32", false, int4_per_group(32), int4_per_group(32)},
  };
  return all;
}

// The float cache of inputs_for(8, length) in one format, one at a time (the next format frees it).
struct NarrowCache {
  std::string format;
  std::size_t length = 0;
  Bf16Kv k_bf16, v_bf16;
  QuantizedKv k, v;
};
const NarrowCache& narrow_cache_for(const CacheFormat& format, std::size_t length) {
  static NarrowCache held;
  if (held.format == format.name && held.length == length) return held;
  held = NarrowCache{};
  const DecodeInputs& in = inputs_for(kGqaKvHeads, length);
  if (format.bf16) {
    held.k_bf16 = to_bf16_kv(in.k);
    held.v_bf16 = to_bf16_kv(in.v);
  } else {
    held.k = quantize_kv(in.k, format.key);
    held.v = quantize_kv(in.v, format.value);
  }
  held.format = format.name;
  held.length = length;
  return held;
}

// The first n positions of a [g, length, d] cache.
Tensor3 first_positions(const Tensor3& x, std::size_t n) {
  return xt::eval(xt::view(x, xt::all(), xt::range(0, static_cast<std::ptrdiff_t>(n)), xt::all()));
}

// The tolerance of `decode` for the first n positions (values in [-1, 1), dequantized ones too:
// every format maps the largest |x| of a group to at most itself).
Tolerance decode_tolerance(std::size_t n) {
  const double rtol = 2 * reduction_rtol(std::max(kHeadDim, n));
  return {attention_tolerance(kHeadDim, n, std::sqrt(static_cast<double>(kHeadDim)), 1.0), rtol};
}

// Cache bytes per generated token, counters and rates, as `decode` reports them.
void report_cache_read(benchmark::State& state, double bytes_per_position, std::size_t length) {
  const double cache_bytes = bytes_per_position * static_cast<double>(length);
  set_bytes(state, cache_bytes);
  state.counters["cache_MiB"] = cache_bytes / (1 << 20);
  state.counters["B/position"] = bytes_per_position;
  state.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
}

// One decode step over the cache in `format`, validated first on the first min(length, 4096)
// positions against the reference over the same format (quantizing those positions alone gives
// the same codes and scales: per token trivially, per channel because 4096 is a whole number of
// groups of 32 tokens).
void narrow_decode(benchmark::State& state, const CacheFormat& format) {
  const auto length = static_cast<std::size_t>(state.range(1));
  const NarrowCache& cache = narrow_cache_for(format, length);
  const DecodeInputs& in = inputs_for(kGqaKvHeads, length);
  const std::size_t n = std::min(length, kValidatedLength);
  double bytes_per_position = 0.0;
  if (format.bf16) {
    const Bf16Kv k_first = to_bf16_kv(first_positions(in.k, n)), v_first = to_bf16_kv(first_positions(in.v, n));
    if (!validate(state, opt::bf16_kv_decode_attention(in.q, cache.k_bf16, cache.v_bf16, n).out,
                  ref::bf16_kv_decode_attention(in.q, k_first, v_first, n).out, decode_tolerance(n)))
      return;
    for (auto _ : state) benchmark::DoNotOptimize(opt::bf16_kv_decode_attention(in.q, cache.k_bf16, cache.v_bf16, length));
    bytes_per_position = 2.0 * kGqaKvHeads * kHeadDim * sizeof(std::uint16_t);
  } else {
    const QuantizedKv k_first = quantize_kv(first_positions(in.k, n), format.key);
    const QuantizedKv v_first = quantize_kv(first_positions(in.v, n), format.value);
    if (!validate(state, opt::quantized_kv_decode_attention(in.q, cache.k, cache.v, n),
                  ref::quantized_kv_decode_attention(in.q, k_first, v_first), decode_tolerance(n)))
      return;
    for (auto _ : state) benchmark::DoNotOptimize(opt::quantized_kv_decode_attention(in.q, cache.k, cache.v, length));
    bytes_per_position = kv_bytes_per_token(format.key, kGqaKvHeads, kHeadDim) +
                         kv_bytes_per_token(format.value, kGqaKvHeads, kHeadDim);
  }
  report_cache_read(state, bytes_per_position, length);
}

// The float cache laid out per token [n, g, d], one length at a time.
struct PerTokenCache {
  std::size_t length = 0;
  Tensor3 k, v;
};
const PerTokenCache& per_token_cache_for(std::size_t length) {
  static PerTokenCache held;
  if (held.length == length) return held;
  held = PerTokenCache{};
  const DecodeInputs& in = inputs_for(kGqaKvHeads, length);
  held.k = opt::per_token_layout(in.k);
  held.v = opt::per_token_layout(in.v);
  held.length = length;
  return held;
}

// The float decode step over either layout (v2, the same kernel and splits), validated first.
void layout_decode(benchmark::State& state, bool per_token) {
  const auto length = static_cast<std::size_t>(state.range(1));
  const DecodeInputs& in = inputs_for(kGqaKvHeads, length);
  const std::size_t n = std::min(length, kValidatedLength);
  const auto expected = ref::gqa_decode_attention(in.q, in.k, in.v, n);
  if (per_token) {
    const PerTokenCache& cache = per_token_cache_for(length);
    if (!validate(state, opt::gqa_decode_attention_per_token(in.q, cache.k, cache.v, n).out, expected.out, decode_tolerance(n)))
      return;
    for (auto _ : state) benchmark::DoNotOptimize(opt::gqa_decode_attention_per_token(in.q, cache.k, cache.v, length));
  } else {
    if (!validate(state, opt::gqa_decode_attention_v2(in.q, in.k, in.v, n).out, expected.out, decode_tolerance(n))) return;
    for (auto _ : state) benchmark::DoNotOptimize(opt::gqa_decode_attention_v2(in.q, in.k, in.v, length));
  }
  report_cache_read(state, 2.0 * kGqaKvHeads * kHeadDim * sizeof(float), length);
}

void register_quantized_and_layout_benchmarks() {
  auto shape = [](std::int64_t length) {
    return [=](benchmark::internal::Benchmark* b) {
      b->Args({static_cast<std::int64_t>(kGqaKvHeads), length})->ArgNames({"g", "length"});
    };
  };
  for (std::int64_t length : {4096, 32768}) {
    // The float cache: the chapter's decode step, reporting as the formats below do.
    add_benchmark("kv_format_decode_fp32", [](benchmark::State& state) {
      const auto length = static_cast<std::size_t>(state.range(1));
      const DecodeInputs& in = inputs_for(kGqaKvHeads, length);
      const std::size_t n = std::min(length, kValidatedLength);
      if (!validate(state, opt::gqa_decode_attention(in.q, in.k, in.v, n).out,
                    ref::gqa_decode_attention(in.q, in.k, in.v, n).out, decode_tolerance(n)))
        return;
      for (auto _ : state) benchmark::DoNotOptimize(opt::gqa_decode_attention(in.q, in.k, in.v, length));
      report_cache_read(state, 2.0 * kGqaKvHeads * kHeadDim * sizeof(float), length);
    }, shape(length));
    for (const CacheFormat& format : cache_formats())
      add_benchmark(std::string("kv_format_decode_") + format.name,
                    [&format](benchmark::State& state) { narrow_decode(state, format); }, shape(length));
    add_benchmark("kv_layout_decode_per_head", [](benchmark::State& state) { layout_decode(state, false); }, shape(length));
    add_benchmark("kv_layout_decode_per_token", [](benchmark::State& state) { layout_decode(state, true); }, shape(length));
  }
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
  register_quantized_and_layout_benchmarks();
}

}  // namespace tvlab::bench
