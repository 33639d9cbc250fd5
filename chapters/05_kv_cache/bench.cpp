// Chapter 05's benchmarks: one decode step (one generated token, 32 query heads, d = d_v = 128)
// over a KV cache of 1K to 128K positions, for MHA (g = 32), GQA (g = 8) and MQA (g = 1). Decoding
// reads the whole cache once per token for about 4 flops per float, so it is limited by memory
// bandwidth: each version reports the cache bytes read per token, GB/s of them, and tokens/s, next
// to a threaded copy of the GQA cache's size measured in the same run (stream_scale, read + write
// counted). Every version is validated against the double reference before it is timed.
//
// Then the same step over the cache stored in bf16, INT8, FP8 and INT4 and laid out per token;
// over a paged cache, in fp32 and in bf16, INT8 and FP8 pages; MLA's absorbed decode against the
// naive one; generating T tokens with and without a cache; whole MLA and TPA layers, ref against
// opt; and the CUDA kernels where a device is present (noted as not timed otherwise). The versions
// are timed by name (v1, v2, ...) rather than through the registry, so that the lesson can compare
// the steps of one backend.
//
//   build/default/chapters/bench_05_kv_cache --benchmark_counters_tabular=true

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../common/bench_attention.hpp"
#include "../common/bench_cuda.hpp"
#include "../common/bench_support.hpp"
#include "tvlab/analysis/kv_memory.hpp"
#include "tvlab/core/compare.hpp"
#include "tvlab/core/kv_bf16.hpp"
#include "tvlab/core/kv_quant.hpp"
#include "tvlab/core/paged_kv_cache.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/cuda/kv_decode.hpp"
#include "tvlab/cuda/kv_decode_device.hpp"
#include "tvlab/opt/attention.hpp"
#include "tvlab/opt/bf16_kv_decode.hpp"
#include "tvlab/opt/gqa_attention.hpp"
#include "tvlab/opt/gqa_decode.hpp"
#include "tvlab/opt/kv_layout_decode.hpp"
#include "tvlab/opt/mla.hpp"
#include "tvlab/opt/mla_decode.hpp"
#include "tvlab/opt/paged_attention.hpp"
#include "tvlab/opt/quantized_kv_attention.hpp"
#include "tvlab/opt/tpa.hpp"
#include "tvlab/ref/bf16_kv_decode.hpp"
#include "tvlab/ref/gqa_attention.hpp"
#include "tvlab/ref/gqa_decode.hpp"
#include "tvlab/ref/kv_cache.hpp"
#include "tvlab/ref/mla.hpp"
#include "tvlab/ref/mla_decode.hpp"
#include "tvlab/ref/paged_attention.hpp"
#include "tvlab/ref/quantized_kv_attention.hpp"
#include "tvlab/ref/tpa.hpp"

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
// kernel (tvlab/opt/bf16_kv_decode.hpp, tvlab/opt/quantized_kv_attention.hpp); and the float cache
// laid out per head [g, n, d] against per token [n, g, d] (tvlab/opt/kv_layout_decode.hpp). Each
// reports the cache bytes it reads per generated token (codes + scales + minimums) as cache_MiB
// and per position as B/position, GB/s of them, and tokens/s.

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

// ------------------------------------------------ paged decode, MLA decode, with and without a cache

// Uniform values in [-1, 1) from a 64-bit xorshift, as inputs_for's (seeded per use).
void fill_uniform(float* x, std::size_t n, std::uint64_t state) {
  for (std::size_t i = 0; i < n; ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    x[i] = static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-52 - 1.0);
  }
}
Tensor2 uniform_matrix(std::size_t rows, std::size_t cols, std::uint64_t seed) {
  Tensor2 x = Tensor2::from_shape({rows, cols});
  fill_uniform(x.data(), x.size(), seed);
  return x;
}
Tensor3 uniform_tensor(std::size_t a, std::size_t b, std::size_t c, std::uint64_t seed) {
  Tensor3 x = Tensor3::from_shape({a, b, c});
  fill_uniform(x.data(), x.size(), seed);
  return x;
}

// (a) The GQA decode step (32 query heads, g = 8, d = 128) over the same keys and values stored
// contiguously, [g, n, d], and paged, blocks of 16 positions [blocks, g, 16, d] read through a
// block table. The table is a random permutation of the sequence's blocks, as a pool shared by
// many sequences hands them out: no two consecutive logical blocks are neighbours in memory.
// Also with blocks of 128 positions, vLLM's default on a CPU (with its optimized CPU backend).
constexpr std::size_t kPagedKvHeads = 8, kPagedBlockSize = 16, kCpuPagedBlockSize = 128;
struct PagedInputs {
  std::size_t length = 0, block_size = 0;
  Tensor2 q;
  Tensor3 k, v;  // contiguous
  std::unique_ptr<PagedKvCache> cache;
  std::vector<std::size_t> table;
};
PagedInputs& paged_inputs_for(std::size_t length, std::size_t block_size = kPagedBlockSize) {
  static PagedInputs held;
  if (held.length == length && held.block_size == block_size) return held;
  held = PagedInputs{};  // free the previous caches first
  held.q = uniform_matrix(kHeads, kHeadDim, 11);
  held.k = uniform_tensor(kPagedKvHeads, length, kHeadDim, 12);
  held.v = uniform_tensor(kPagedKvHeads, length, kHeadDim, 13);
  const std::size_t blocks = (length + block_size - 1) / block_size;
  held.cache = std::make_unique<PagedKvCache>(PagedKvConfig{
      .num_blocks = blocks, .block_size = block_size, .num_kv_heads = kPagedKvHeads, .head_dim = kHeadDim});
  const SequenceId seq = held.cache->add_sequence();
  held.cache->append(seq, held.k, held.v);
  // A random order of the blocks (Fisher-Yates with the xorshift): the table reads the keys of
  // logical block l from physical block table[l]; the contiguous copy is permuted alike, so that
  // both hold the same sequence.
  held.table = held.cache->block_table(seq);
  std::uint64_t state = 0x2545f4914f6cdd1d;
  for (std::size_t i = held.table.size(); i > 1; --i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    std::swap(held.table[i - 1], held.table[state % i]);
  }
  const Tensor4& pool_k = held.cache->key_blocks();
  const Tensor4& pool_v = held.cache->value_blocks();
  for (std::size_t j = 0; j < kPagedKvHeads; ++j)
    for (std::size_t t = 0; t < length; ++t)
      for (std::size_t e = 0; e < kHeadDim; ++e) {
        held.k(j, t, e) = pool_k(held.table[t / block_size], j, t % block_size, e);
        held.v(j, t, e) = pool_v(held.table[t / block_size], j, t % block_size, e);
      }
  held.length = length;
  held.block_size = block_size;
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
    if (!validate(state, opt::quantized_kv_decode_attention_split_k(in.q, cache.k, cache.v, n, std::nullopt, 0),
                  ref::quantized_kv_decode_attention(in.q, k_first, v_first), decode_tolerance(n)))
      return;
    for (auto _ : state) benchmark::DoNotOptimize(opt::quantized_kv_decode_attention(in.q, cache.k, cache.v));
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

void paged_vs_contiguous(benchmark::State& state, bool paged, std::size_t block_size = kPagedBlockSize) {
  const auto length = static_cast<std::size_t>(state.range(0));
  const PagedInputs& in = paged_inputs_for(length, block_size);
  // Against the double reference over the first 4096 positions, with the tolerance of `decode`.
  const std::size_t n = std::min(length, kValidatedLength);
  const Tolerance tol{attention_tolerance(kHeadDim, n, std::sqrt(static_cast<double>(kHeadDim)), 1.0),
                      2 * reduction_rtol(std::max(kHeadDim, n))};
  const Tensor2 expected = ref::paged_decode_attention_with_lse(in.q, *in.cache, in.table, n).out;
  const Tensor2 got = paged ? opt::paged_decode_attention(in.q, *in.cache, in.table, n)
                            : opt::gqa_decode_attention(in.q, in.k, in.v, n).out;
  if (!validate(state, got, expected, tol)) return;
  if (paged)
    for (auto _ : state) benchmark::DoNotOptimize(opt::paged_decode_attention_with_lse(in.q, *in.cache, in.table, length));
  else
    for (auto _ : state) benchmark::DoNotOptimize(opt::gqa_decode_attention(in.q, in.k, in.v, length));
  // Both read g kv heads x length positions x (d + d_v) floats per token.
  const double cache_bytes = static_cast<double>(kPagedKvHeads * length * 2 * kHeadDim * sizeof(float));
  set_bytes(state, cache_bytes);
  state.counters["cache_MiB"] = cache_bytes / (1 << 20);
  state.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
}

// (b) MLA's decode step at DeepSeek-V2/V3's shape: n_h = 128 heads, latent d_c = 512, decoupled
// RoPE keys d_h^R = 64, d_h = 128. The absorbed form reads the latent cache, (d_c + d_h^R) floats
// per token; the naive one first expands it into per-head keys [n_h, n, d_h + d_h^R] and values
// [n_h, n, d_h], MHA's cache, 320 floats per token and head, 71x larger, and decodes over that.
constexpr std::size_t kMlaHeads = 128, kMlaLatent = 512, kMlaRope = 64, kMlaHeadDim = 128;
// The naive form's cache is timed only while it fits in this many bytes (it is held in memory
// besides the latent one): at 32K positions it would take 5.4 GB.
constexpr double kNaiveCacheLimit = 4.0 * (1 << 30);
constexpr std::size_t kMlaValidatedLength = 1024;

double naive_mla_cache_bytes(std::size_t length) {
  return static_cast<double>(kMlaHeads * length * (kMlaHeadDim + kMlaRope + kMlaHeadDim) * sizeof(float));
}

struct MlaInputs {
  std::size_t length = 0;
  Tensor2 q_absorbed, latents, rope_keys;
};
const MlaInputs& mla_inputs_for(std::size_t length) {
  static MlaInputs held;
  if (held.length == length) return held;
  held = MlaInputs{};
  held.q_absorbed = uniform_matrix(kMlaHeads, kMlaLatent + kMlaRope, 21);
  held.latents = uniform_matrix(length, kMlaLatent, 22);
  held.rope_keys = uniform_matrix(length, kMlaRope, 23);
  held.length = length;
  return held;
}
double mla_scale() { return 1.0 / std::sqrt(static_cast<double>(kMlaHeadDim + kMlaRope)); }

using MlaFn = ref::MlaDecodeAttention (*)(const Tensor2&, const Tensor2&, const Tensor2&, std::size_t, double);

void mla_absorbed(benchmark::State& state, MlaFn fn) {
  const auto length = static_cast<std::size_t>(state.range(0));
  const MlaInputs& in = mla_inputs_for(length);
  const double scale = mla_scale();
  // Scores are sums of d_c + d_h^R = 576 products of values in [-1, 1): |s| <= scale 576.
  const std::size_t n = std::min(length, kMlaValidatedLength), width = kMlaLatent + kMlaRope;
  const Tolerance tol{attention_tolerance(width, n, scale * static_cast<double>(width), 1.0),
                      2 * reduction_rtol(std::max(width, n))};
  if (!validate(state, fn(in.q_absorbed, in.latents, in.rope_keys, n, scale).out_latent,
                ref::mla_absorbed_decode_attention(in.q_absorbed, in.latents, in.rope_keys, n, scale).out_latent, tol))
    return;
  for (auto _ : state) benchmark::DoNotOptimize(fn(in.q_absorbed, in.latents, in.rope_keys, length, scale));
  const double cache_bytes = static_cast<double>(length * width * sizeof(float));
  set_bytes(state, cache_bytes);
  state.counters["cache_MiB"] = cache_bytes / (1 << 20);
  state.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
}

// The naive form: per-head keys [k^C_i; k^R] (the RoPE key shared by the heads, copied into each)
// and values, random as the latent cache (the decode step's cost does not depend on where they
// came from), over the optimized MHA decode step.
void mla_naive(benchmark::State& state) {
  const auto length = static_cast<std::size_t>(state.range(0));
  mla_inputs_for(0);  // free the latent cache: this one is up to 4 GiB
  const Tensor2 q = uniform_matrix(kMlaHeads, kMlaHeadDim + kMlaRope, 31);
  const Tensor3 k = uniform_tensor(kMlaHeads, length, kMlaHeadDim + kMlaRope, 32);
  const Tensor3 v = uniform_tensor(kMlaHeads, length, kMlaHeadDim, 33);
  const double scale = mla_scale();
  const std::size_t n = std::min(length, kMlaValidatedLength), width = kMlaHeadDim + kMlaRope;
  const Tolerance tol{attention_tolerance(width, n, scale * static_cast<double>(width), 1.0),
                      2 * reduction_rtol(std::max(width, n))};
  if (!validate(state, opt::gqa_decode_attention(q, k, v, n, scale).out, ref::gqa_decode_attention(q, k, v, n, scale).out,
                tol))
    return;
  for (auto _ : state) benchmark::DoNotOptimize(opt::gqa_decode_attention(q, k, v, length, scale));
  set_bytes(state, naive_mla_cache_bytes(length));
  state.counters["cache_MiB"] = naive_mla_cache_bytes(length) / (1 << 20);
  state.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
}

// (c) Generating T tokens after a prompt of 64 with one attention layer (d_model 512, 8 heads of
// 64, MHA), with a KV cache and without. The inputs x_t are fixed random rows (the layer alone,
// without the model that would compute the next input from the output). With the cache each
// step projects the new token's q, k, v (three [1, 512] x [512, 512] products), appends k and v,
// runs the decode step over the cache and projects the output: O(d^2 + n d) per token. Without,
// each step recomputes the keys and values of all s tokens so far ([s, 512] x [512, 512] twice,
// opt::multi_head_attention over them): O(s d^2) per token, O(T^2 d^2) in all.
constexpr std::size_t kSmallModel = 512, kSmallHeads = 8, kSmallHeadDim = kSmallModel / kSmallHeads, kPrompt = 64;

MhaWeights small_layer() {
  const double bound = 1.0 / std::sqrt(static_cast<double>(kSmallModel));  // keeps activations of order 1
  MhaWeights w{uniform_matrix(kSmallModel, kSmallModel, 41), uniform_matrix(kSmallModel, kSmallModel, 42),
               uniform_matrix(kSmallModel, kSmallModel, 43), uniform_matrix(kSmallModel, kSmallModel, 44)};
  for (Tensor2* m : {&w.w_q, &w.w_k, &w.w_v, &w.w_o}) *m *= static_cast<float>(bound);
  return w;
}

// y = x W for one row x [d_in] and W [d_in, d_out], row by row of W (contiguous, vectorised).
void project_row(const float* x, const Tensor2& w, float* y) {
  const std::size_t d_in = w.shape()[0], d_out = w.shape()[1];
  std::fill(y, y + d_out, 0.0f);
  for (std::size_t c = 0; c < d_in; ++c) {
    const float xc = x[c];
    const float* wc = w.data() + c * d_out;
#pragma omp simd
    for (std::size_t j = 0; j < d_out; ++j) y[j] += xc * wc[j];
  }
}

// Generates tokens kPrompt .. kPrompt + T - 1 with a cache [h, kPrompt + T, d_k]; returns the last
// token's output [1, d_model].
Tensor2 generate_with_cache(const Tensor2& x, const MhaWeights& w, std::size_t tokens) {
  const std::size_t total = kPrompt + tokens;
  Tensor3 k_cache = Tensor3::from_shape({kSmallHeads, total, kSmallHeadDim});
  Tensor3 v_cache = Tensor3::from_shape({kSmallHeads, total, kSmallHeadDim});
  // Prefill: the prompt's outputs in one causal pass, its keys and values into the cache.
  AttentionConfig causal;
  causal.mask.causal = true;
  const Tensor2 prompt = xt::view(x, xt::range(0, kPrompt), xt::all());
  benchmark::DoNotOptimize(opt::multi_head_attention(prompt, prompt, w, static_cast<int>(kSmallHeads), causal));
  std::vector<float> row(kSmallModel);
  auto cache_token = [&](std::size_t t) {  // k_t = x_t W_k, v_t = x_t W_v, head by head into the cache
    project_row(x.data() + t * kSmallModel, w.w_k, row.data());
    for (std::size_t i = 0; i < kSmallHeads; ++i)
      std::copy_n(row.data() + i * kSmallHeadDim, kSmallHeadDim, &k_cache(i, t, 0));
    project_row(x.data() + t * kSmallModel, w.w_v, row.data());
    for (std::size_t i = 0; i < kSmallHeads; ++i)
      std::copy_n(row.data() + i * kSmallHeadDim, kSmallHeadDim, &v_cache(i, t, 0));
  };
  for (std::size_t t = 0; t < kPrompt; ++t) cache_token(t);
  Tensor2 q = Tensor2::from_shape({kSmallHeads, kSmallHeadDim});
  Tensor2 y = Tensor2::from_shape({1, kSmallModel});
  for (std::size_t t = kPrompt; t < total; ++t) {
    project_row(x.data() + t * kSmallModel, w.w_q, q.data());  // [h d_k] = [h, d_k] row-major
    cache_token(t);
    const ref::GqaDecodeOutput o = opt::gqa_decode_attention(q, k_cache, v_cache, t + 1);
    project_row(o.out.data(), w.w_o, y.data());
  }
  return y;
}

// The same tokens, each step recomputing every key and value; returns the last token's output.
Tensor2 generate_without_cache(const Tensor2& x, const MhaWeights& w, std::size_t tokens) {
  AttentionConfig causal;
  causal.mask.causal = true;
  const Tensor2 prompt = xt::view(x, xt::range(0, kPrompt), xt::all());
  benchmark::DoNotOptimize(opt::multi_head_attention(prompt, prompt, w, static_cast<int>(kSmallHeads), causal));
  Tensor2 y;
  for (std::size_t t = kPrompt; t < kPrompt + tokens; ++t) {
    const Tensor2 seen = xt::view(x, xt::range(0, t + 1), xt::all());
    const Tensor2 last = xt::view(x, xt::range(t, t + 1), xt::all());
    y = opt::multi_head_attention(last, seen, w, static_cast<int>(kSmallHeads));  // the last token sees all
  }
  return y;
}

void generate(benchmark::State& state, bool with_cache) {
  const auto tokens = static_cast<std::size_t>(state.range(0));
  const Tensor2 x = uniform_matrix(kPrompt + tokens, kSmallModel, 51);
  const MhaWeights w = small_layer();
  // Both give the last token's output of the same layer: the cached run against the recomputing one
  // (one step of it), an attention over kPrompt + T keys behind two projections of d_model terms.
  const Tensor2 with = generate_with_cache(x, w, tokens);
  const Tensor2 seen = x;
  const Tensor2 last = xt::view(x, xt::range(kPrompt + tokens - 1, kPrompt + tokens), xt::all());
  const Tensor2 recomputed = opt::multi_head_attention(last, seen, w, static_cast<int>(kSmallHeads));
  const double rtol = 4 * reduction_rtol(std::max(kSmallModel, kPrompt + tokens));
  if (!validate(state, with, recomputed, {rtol, rtol})) return;
  for (auto _ : state)
    benchmark::DoNotOptimize(with_cache ? generate_with_cache(x, w, tokens) : generate_without_cache(x, w, tokens));
  const KvHeads heads{static_cast<int>(kSmallHeads), static_cast<int>(kSmallHeads)};
  // The projections' multiply-adds of the prompt and the T tokens, in closed form.
  const auto macs = analysis::decode_projection_macs(kPrompt, tokens, kSmallModel, heads, kSmallHeadDim, with_cache);
  state.counters["proj_GMAC"] = static_cast<double>(macs) / 1e9;
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate);
}

void register_paged_and_mla_benchmarks() {
  // (a) paged against contiguous, 4K to 128K positions (the 128K caches: 1 GiB each).
  for (std::int64_t length : {4096, 32768, 131072}) {
    const auto at_length = [=](benchmark::internal::Benchmark* b) { b->Arg(length)->ArgNames({"length"}); };
    for (const bool paged : {false, true})
      add_benchmark(paged ? "gqa_decode_paged" : "gqa_decode_contiguous",
                    [paged](benchmark::State& state) { paged_vs_contiguous(state, paged); }, at_length);
    add_benchmark("gqa_decode_paged_block128",
                  [](benchmark::State& state) { paged_vs_contiguous(state, true, kCpuPagedBlockSize); }, at_length);
  }
  // (b) MLA: absorbed v2 and v1, and the naive expanded cache where it fits.
  for (std::int64_t length : {1024, 4096, 32768}) {
    const std::vector<std::pair<const char*, MlaFn>> absorbed{{"v2", opt::mla_absorbed_decode_attention_v2},
                                                              {"v1", opt::mla_absorbed_decode_attention_v1}};
    for (const auto& [name, fn] : absorbed)
      add_benchmark(std::string("mla_decode_absorbed_") + name,
                    [fn = fn](benchmark::State& state) { mla_absorbed(state, fn); },
                    [=](benchmark::internal::Benchmark* b) { b->Arg(length)->ArgNames({"length"}); });
    if (naive_mla_cache_bytes(static_cast<std::size_t>(length)) <= kNaiveCacheLimit)
      add_benchmark("mla_decode_naive", mla_naive,
                    [=](benchmark::internal::Benchmark* b) { b->Arg(length)->ArgNames({"length"}); });
    else
      note_not_timed("mla_decode_naive/length:" + std::to_string(length),
                     "its expanded cache (" + std::to_string(naive_mla_cache_bytes(static_cast<std::size_t>(length)) / 1e9) +
                         " GB) exceeds the 4 GiB this benchmark allows itself");
  }
  // (c) T generated tokens with and without the cache.
  for (std::int64_t tokens : {256, 512, 1024})
    for (const bool with_cache : {true, false})
      add_benchmark(with_cache ? "generate_with_cache" : "generate_without_cache",
                    [with_cache](benchmark::State& state) { generate(state, with_cache); },
                    [=](benchmark::internal::Benchmark* b) { b->Arg(tokens)->ArgNames({"tokens"}); });
}

// (d) The paged step over a pool stored in fp32, bf16, INT8 or FP8 E4M3 (one scale per token and kv
// head; PagedKvConfig::storage), quantized as the tokens are appended: the floats of
// inputs_for(8, length) in pages of 16, the table shuffled as paged_inputs_for's. Each format's
// request of up to 16 rows is dequantized into an L1 buffer inside the kernel
// (tvlab/opt/paged_attention.hpp), so the bytes read per position are the format's
// (PagedKvCache::bytes_per_token). One pool at a time.
struct PagedStorageInputs {
  PagedKvStorage storage = PagedKvStorage::fp32;
  std::size_t length = 0;
  std::unique_ptr<PagedKvCache> cache;
  std::vector<std::size_t> table;
};
const PagedStorageInputs& paged_storage_inputs_for(PagedKvStorage storage, std::size_t length) {
  static PagedStorageInputs held;
  if (held.cache && held.storage == storage && held.length == length) return held;
  held = PagedStorageInputs{};
  const DecodeInputs& in = inputs_for(kGqaKvHeads, length);
  held.cache = std::make_unique<PagedKvCache>(PagedKvConfig{.num_blocks = (length + kPagedBlockSize - 1) / kPagedBlockSize,
                                                            .block_size = kPagedBlockSize,
                                                            .num_kv_heads = kGqaKvHeads,
                                                            .head_dim = kHeadDim,
                                                            .storage = storage});
  const SequenceId seq = held.cache->add_sequence();
  held.cache->append(seq, in.k, in.v);
  held.table = held.cache->block_table(seq);
  std::shuffle(held.table.begin(), held.table.end(), std::mt19937_64(7));
  held.storage = storage;
  held.length = length;
  return held;
}

// One paged step in `storage`, validated first against the reference over the same pool and table
// on the first min(length, 4096) positions.
void paged_storage_decode(benchmark::State& state, PagedKvStorage storage) {
  const auto length = static_cast<std::size_t>(state.range(1));
  const PagedStorageInputs& in = paged_storage_inputs_for(storage, length);
  const Tensor2& q = inputs_for(kGqaKvHeads, length).q;
  const std::size_t n = std::min(length, kValidatedLength);
  if (!validate(state, opt::paged_decode_attention(q, *in.cache, in.table, n),
                ref::paged_decode_attention_with_lse(q, *in.cache, in.table, n).out, decode_tolerance(n)))
    return;
  for (auto _ : state) benchmark::DoNotOptimize(opt::paged_decode_attention_with_lse(q, *in.cache, in.table, length));
  report_cache_read(state, static_cast<double>(in.cache->bytes_per_token()), length);
}

void register_paged_storage_benchmarks() {
  for (const PagedKvStorage storage :
       {PagedKvStorage::fp32, PagedKvStorage::bf16, PagedKvStorage::int8, PagedKvStorage::fp8_e4m3})
    add_benchmark(std::string("paged_storage_decode_") + storage_name(storage),
                  [storage](benchmark::State& state) { paged_storage_decode(state, storage); },
                  [](benchmark::internal::Benchmark* b) {
                    b->Args({static_cast<std::int64_t>(kGqaKvHeads), 32768})->ArgNames({"g", "length"});
                  });
}

// ------------------------------------------------------------ the CUDA decode kernels


// One decode step on the device: the inputs of `inputs_for(kv_heads, length)` uploaded, the work
// sized by `cuda::device::plan_decode` as the host-tensor entry points size it, and the workspace.
struct DeviceDecode {
  cuda::DeviceBuffer<float> q, k, v, out, lse, partial_m, partial_l, partial_o;
  cuda::DeviceBuffer<unsigned long long> table;
  cuda::device::DecodeArgs args;

  // Binds the buffers once the shapes in `args` are planned.
  void allocate_outputs() {
    const std::size_t h = args.heads, dv = args.head_dim_v, s = args.splits;
    out = cuda::DeviceBuffer<float>(h * dv);
    lse = cuda::DeviceBuffer<float>(h);
    partial_m = cuda::DeviceBuffer<float>(s * h);
    partial_l = cuda::DeviceBuffer<float>(s * h);
    partial_o = cuda::DeviceBuffer<float>(s * h * dv);
    args.q = q.get();
    args.k = k.get();
    args.v = args.values_in_keys ? k.get() : v.get();
    args.out = out.get();
    args.lse = lse.get();
    args.partial_m = partial_m.get();
    args.partial_l = partial_l.get();
    args.partial_o = partial_o.get();
  }
};

// The cache bytes one token reads, as `decode` counts them, and the same counters.
void set_decode_counters(benchmark::State& state, double cache_bytes) {
  set_bytes(state, cache_bytes);
  state.counters["cache_MiB"] = cache_bytes / (1 << 20);
  state.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
}

// The tolerance `decode` validates with (values in [-1, 1)).
Tolerance decode_tolerance(std::size_t d, std::size_t n, double magnitude) {
  return {attention_tolerance(d, n, magnitude, 1.0), 2 * reduction_rtol(std::max(d, n))};
}

// GQA / MQA / MHA over a contiguous cache [g, length, d]: what `decode` times on the CPU.
void cuda_gqa_decode(benchmark::State& state) {
  const auto kv_heads = static_cast<std::size_t>(state.range(0)), length = static_cast<std::size_t>(state.range(1));
  const DecodeInputs& in = inputs_for(kv_heads, length);
  const std::size_t n = std::min(length, kValidatedLength);
  if (!validate(state, cuda::gqa_decode_attention(in.q, in.k, in.v, n).out, ref::gqa_decode_attention(in.q, in.k, in.v, n).out,
                decode_tolerance(kHeadDim, n, std::sqrt(static_cast<double>(kHeadDim)))))
    return;
  DeviceDecode dev{.q = {in.q.data(), in.q.size()}, .k = {in.k.data(), in.k.size()}, .v = {in.v.data(), in.v.size()}};
  auto& a = dev.args;
  a.heads = kHeads;
  a.kv_heads = kv_heads;
  a.length = a.capacity = length;
  a.head_dim = a.head_dim_v = a.k_stride = a.v_stride = kHeadDim;
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(kHeadDim)));
  cuda::device::plan_decode("cuda_gqa_decode", a);
  dev.allocate_outputs();
  time_on_device(state, [&] { cuda::device::decode_attention(dev.args); });
  set_decode_counters(state, static_cast<double>(kv_heads * length * 2 * kHeadDim * sizeof(float)));
  state.counters["splits"] = static_cast<double>(a.splits);
}

// The same number of positions in pages of 16, the blocks of the table in a shuffled order: the
// pool [length / 16, g, 16, d] is the contiguous cache's floats read in that layout (other
// positions, the same bytes; the time does not depend on the values), and a table that is a
// permutation reads every block once, from scattered places. Only the kernel's addressing differs
// from cuda_gqa_decode. Validated through the host-tensor entry point on a small PagedKvCache, as
// the timed pool is not one.
void cuda_paged_decode(benchmark::State& state) {
  constexpr std::size_t kBlock = 16;
  const auto kv_heads = static_cast<std::size_t>(state.range(0)), length = static_cast<std::size_t>(state.range(1));
  {
    PagedKvCache cache({.num_blocks = 2 * 64, .block_size = kBlock, .num_kv_heads = kv_heads, .head_dim = kHeadDim});
    const SequenceId s = cache.add_sequence();
    const DecodeInputs& small = inputs_for(kv_heads, 1024);
    cache.append(s, small.k, small.v);
    const Tensor2 expected = ref::paged_decode_attention(small.q, cache, cache.block_table(s), 1024);
    if (!validate(state, cuda::paged_decode_attention(small.q, cache, cache.block_table(s), 1024), expected,
                  decode_tolerance(kHeadDim, 1024, std::sqrt(static_cast<double>(kHeadDim)))))
      return;
  }
  const std::size_t blocks = length / kBlock;
  const DecodeInputs& in = inputs_for(kv_heads, length);
  std::vector<unsigned long long> table(blocks);
  std::iota(table.begin(), table.end(), 0ULL);
  std::shuffle(table.begin(), table.end(), std::mt19937_64(5));
  DeviceDecode dev{.q = {in.q.data(), in.q.size()}, .k = {in.k.data(), in.k.size()}, .v = {in.v.data(), in.v.size()},
                   .table = {table.data(), table.size()}};
  auto& a = dev.args;
  a.heads = kHeads;
  a.kv_heads = kv_heads;
  a.length = length;
  a.head_dim = a.head_dim_v = a.k_stride = a.v_stride = kHeadDim;
  a.block_table = dev.table.get();
  a.block_size = kBlock;
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(kHeadDim)));
  cuda::device::plan_decode("cuda_paged_decode", a);
  dev.allocate_outputs();
  time_on_device(state, [&] { cuda::device::decode_attention(dev.args); });
  set_decode_counters(state, static_cast<double>(kv_heads * length * 2 * kHeadDim * sizeof(float)));
}

// MLA's absorbed step at DeepSeek-V2/V3's widths: 128 heads over one cache of [c^KV; k^R] rows
// (512 + 64 floats), the values the first 512 of them. The cache read per token is length x 576
// floats; the arithmetic, 2 x 128 x (576 + 512) flops per position, is reported as FLOP/s.
void cuda_mla_decode(benchmark::State& state) {
  constexpr std::size_t kMlaHeads = 128, kLatent = 512, kRope = 64, kWidth = kLatent + kRope;
  const auto length = static_cast<std::size_t>(state.range(0));
  Rng rng(17);
  const Tensor2 q = rng.normal_matrix(kMlaHeads, kWidth), latents = rng.normal_matrix(length, kLatent),
                rope_keys = rng.normal_matrix(length, kRope);
  const double scale = 1.0 / std::sqrt(192.0);  // 1 / sqrt(d_h + d_h^R) = 1 / sqrt(128 + 64)
  const std::size_t n = std::min(length, kValidatedLength);
  // The score bound M = scale max_i |q_i|_2 max_t |[c_t; k^R_t]|_2 over the validated rows
  // (Cauchy-Schwarz), as the tests take it.
  const auto squared_norm = [](const float* x, std::size_t size) {
    double sum = 0.0;
    for (std::size_t c = 0; c < size; ++c) sum += static_cast<double>(x[c]) * x[c];
    return sum;
  };
  double q_norm = 0.0, k_norm = 0.0, v_max = 0.0;
  for (std::size_t i = 0; i < kMlaHeads; ++i) q_norm = std::max(q_norm, std::sqrt(squared_norm(q.data() + i * kWidth, kWidth)));
  for (std::size_t t = 0; t < n; ++t) {
    k_norm = std::max(k_norm, std::sqrt(squared_norm(latents.data() + t * kLatent, kLatent) +
                                        squared_norm(rope_keys.data() + t * kRope, kRope)));
    for (std::size_t c = 0; c < kLatent; ++c) v_max = std::max(v_max, static_cast<double>(std::fabs(latents(t, c))));
  }
  const Tolerance tol{attention_tolerance(kWidth, n, scale * q_norm * k_norm, v_max), 2 * reduction_rtol(std::max(kWidth, n))};
  if (!validate(state, cuda::mla_absorbed_decode_attention(q, latents, rope_keys, n, scale).out_latent,
                ref::mla_absorbed_decode_attention(q, latents, rope_keys, n, scale).out_latent, tol))
    return;
  std::vector<float> rows(length * kWidth);
  for (std::size_t t = 0; t < length; ++t) {
    std::copy_n(latents.data() + t * kLatent, kLatent, rows.begin() + static_cast<std::ptrdiff_t>(t * kWidth));
    std::copy_n(rope_keys.data() + t * kRope, kRope, rows.begin() + static_cast<std::ptrdiff_t>(t * kWidth + kLatent));
  }
  DeviceDecode dev{.q = {q.data(), q.size()}, .k = {rows.data(), rows.size()}};
  auto& a = dev.args;
  a.heads = kMlaHeads;
  a.kv_heads = 1;
  a.length = a.capacity = length;
  a.head_dim = a.k_stride = a.v_stride = kWidth;
  a.head_dim_v = kLatent;
  a.values_in_keys = true;
  a.scale = static_cast<float>(scale);
  cuda::device::plan_decode("cuda_mla_decode", a);
  dev.allocate_outputs();
  time_on_device(state, [&] { cuda::device::decode_attention(dev.args); });
  set_decode_counters(state, static_cast<double>(length * kWidth * sizeof(float)));
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * kMlaHeads * (kWidth + kLatent) * static_cast<double>(length),
                                                benchmark::Counter::kIsIterationInvariantRate);
}

// ------------------------------------------------------------- prefill attention, GQA against MHA
//
// The attention of a prefill (tvlab/opt/gqa_attention.hpp): n queries over the n keys of the
// prompt, 32 query heads of d = 128, causal, for g = 8 kv heads (GQA) and g = 32 (MHA). Unlike a
// decode step this is compute-bound: 4 n^2 d flops per query head (two GEMMs of 2 n^2 d), halved by
// the causal rule, whatever g is. GQA stores and reads h/g times fewer keys and values; its scores
// cost as many flops as MHA's. Reports GFLOP/s next to OpenBLAS SGEMM of n = 1024 in the same run.

struct PrefillInputs {
  std::size_t kv_heads = 0, length = 0;
  Tensor3 q, k, v;
};
const PrefillInputs& prefill_inputs_for(std::size_t kv_heads, std::size_t length) {
  static PrefillInputs held;
  if (held.kv_heads == kv_heads && held.length == length) return held;
  held = PrefillInputs{};  // free the previous shape first
  held.q = Tensor3::from_shape({kHeads, length, kHeadDim});
  held.k = Tensor3::from_shape({kv_heads, length, kHeadDim});
  held.v = Tensor3::from_shape({kv_heads, length, kHeadDim});
  fill_uniform(held.q.data(), held.q.size(), 0x51ed270b27a1c3d5);
  fill_uniform(held.k.data(), held.k.size(), 0x2545f4914f6cdd1d);
  fill_uniform(held.v.data(), held.v.size(), 0x9e3779b97f4a7c15);
  held.kv_heads = kv_heads;
  held.length = length;
  return held;
}

void gqa_prefill_attention(benchmark::State& state) {
  const auto kv_heads = static_cast<std::size_t>(state.range(0)), n = static_cast<std::size_t>(state.range(1));
  const PrefillInputs& in = prefill_inputs_for(kv_heads, n);
  AttentionConfig causal;
  causal.mask.causal = true;  // bottom-right: the last rows of q alone are the same queries
  // Against the double reference on the last 32 query rows (every key): the tolerance of float
  // attention, with the score bound of Cauchy-Schwarz (attention_output_tolerance).
  const Tolerance tol = attention_output_tolerance(in.q, in.k, in.v, 1.0 / std::sqrt(static_cast<double>(kHeadDim)));
  if (!validate_attention(state, opt::grouped_scaled_dot_product_attention(in.q, in.k, in.v, causal), in.q,
                          [&](const Tensor3& q_rows) {
                            return ref::grouped_scaled_dot_product_attention(q_rows, in.k, in.v, causal);
                          },
                          tol))
    return;
  for (auto _ : state) benchmark::DoNotOptimize(opt::grouped_scaled_dot_product_attention(in.q, in.k, in.v, causal));
  // 4 n^2 d per query head, halved by the causal rule (the flops the lesson counts; the SGEMMs
  // compute the whole n x n score matrix and the masked half of P V as zeros).
  const double flops = 0.5 * 4.0 * static_cast<double>(n) * static_cast<double>(n) * kHeadDim * kHeads;
  state.counters["GFLOP/s"] = gflops(flops);
  state.counters["kv_MiB"] = static_cast<double>(2 * kv_heads * n * kHeadDim * sizeof(float)) / (1 << 20);
}

void register_gqa_attention_benchmarks() {
  add_openblas_sgemm({1024});
  for (std::int64_t n : {1024, 4096})
    for (std::int64_t kv_heads : {8, 32})
      add_benchmark("opt_gqa_prefill_attention", gqa_prefill_attention, [=](benchmark::internal::Benchmark* b) {
        b->Args({kv_heads, n})->ArgNames({"g", "n"});
      });
}

// ------------------------------------------------------------ the MLA and TPA layers, ref and opt
//
// (g) One generated token through a whole attention layer (projections, RoPE, the cache append,
// attention over `length` cached positions, W^O), the reference against the optimized layer:
// DeepSeek-V2-Lite's MLA layer (d = 2048, 16 heads, d_c = 512, d_h = d_v = 128, d_h^R = 64, no
// query compression) in both forms, and a TPA layer of the same width (16 heads of 128, the T6
// paper's ranks R_Q = 6, R_K = R_V = 2). The caches hold random values of order 1 (the step's cost
// does not depend on them); each iteration starts from a copy of the same cache (the copy is not
// timed, the append inside the layer is). cache_floats counts the floats cached per token.
constexpr std::int64_t kLayerContexts[] = {1024, 4096};

// A weight [rows, cols] of uniform entries scaled by 1/sqrt(rows), so that activations stay of order 1.
Tensor2 layer_weight(std::size_t rows, std::size_t cols, std::uint64_t seed) {
  Tensor2 w = uniform_matrix(rows, cols, seed);
  w *= static_cast<float>(1.0 / std::sqrt(static_cast<double>(rows)));
  return w;
}

MlaWeights mla_layer_weights(const MlaConfig& cfg) {
  const std::size_t d = cfg.hidden_size, h = cfg.num_heads, d_c = cfg.kv_lora_rank;
  const std::size_t d_h = cfg.qk_nope_head_dim, d_r = cfg.qk_rope_head_dim, d_v = cfg.v_head_dim;
  MlaWeights w;
  w.w_uq = layer_weight(d, h * d_h, 51);
  w.w_qr = layer_weight(d, h * d_r, 52);
  w.w_dkv = layer_weight(d, d_c, 53);
  w.kv_norm = xt::ones<float>({d_c});
  w.w_kr = layer_weight(d, d_r, 54);
  w.w_uk = layer_weight(d_c, h * d_h, 55);
  w.w_uv = layer_weight(d_c, h * d_v, 56);
  w.w_o = layer_weight(h * d_v, d, 57);
  return w;
}

// A cache of `length` random positions for `path`.
MlaCache random_mla_cache(const MlaConfig& cfg, MlaPath path, std::size_t length) {
  MlaCache cache(cfg, path);
  const std::size_t h = cfg.num_heads, d_r = cfg.qk_rope_head_dim;
  if (path == MlaPath::naive) {
    cache.keys = uniform_tensor(h, length, cfg.qk_nope_head_dim + d_r, 61);
    cache.values = uniform_tensor(h, length, cfg.v_head_dim, 62);
  } else {
    cache.latents = uniform_matrix(length, cfg.kv_lora_rank, 63);
    cache.rope_keys = uniform_matrix(length, d_r, 64);
  }
  return cache;
}

// The layer's output for one token: W^O over 16 heads' attention outputs, each a weighted average
// over `length` positions; float sums of up to max(d, length) terms against the reference's double
// ones: rtol = 4 reduction_rtol(max(d, length)), atol = rtol times the largest output.
Tolerance layer_tolerance(const Tensor2& reference, std::size_t d, std::size_t length) {
  const double rtol = 4 * reduction_rtol(std::max(d, length));
  return {rtol * static_cast<double>(xt::amax(xt::abs(reference))()), rtol};
}

// Times `step` (one layer call on a fresh copy of `cache`) after checking its output against the
// reference's on the same cache.
template <class Cache, class Step, class Reference>
void time_layer_step(benchmark::State& state, const Cache& cache, std::size_t d, const Step& step,
                     const Reference& reference, double cache_floats_per_token) {
  Cache for_step = cache, for_reference = cache;
  const Tensor2 expected = reference(for_reference);
  if (!validate(state, step(for_step), expected, layer_tolerance(expected, d, static_cast<std::size_t>(state.range(0)))))
    return;
  for (auto _ : state) {
    state.PauseTiming();
    Cache fresh = cache;
    state.ResumeTiming();
    benchmark::DoNotOptimize(step(fresh));
  }
  state.counters["cache_floats"] = cache_floats_per_token;
  state.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
}

using MlaLayer = Tensor2 (*)(const Tensor2&, const MlaWeights&, const MlaConfig&, MlaCache&);

void mla_layer(benchmark::State& state, MlaPath path, MlaLayer layer, MlaLayer reference) {
  const MlaConfig cfg = deepseek_v2_lite_mla();
  const MlaWeights w = mla_layer_weights(cfg);
  const Tensor2 x = uniform_matrix(1, cfg.hidden_size, 65);
  time_layer_step(
      state, random_mla_cache(cfg, path, static_cast<std::size_t>(state.range(0))), cfg.hidden_size,
      [&](MlaCache& cache) { return layer(x, w, cfg, cache); },
      [&](MlaCache& cache) { return reference(x, w, cfg, cache); },
      static_cast<double>(mla_cache_floats_per_token(cfg, path)));
}

using TpaLayer = Tensor2 (*)(const Tensor2&, const TpaWeights&, const TpaConfig&, TpaCache&);

void tpa_layer(benchmark::State& state, TpaLayer layer) {
  TpaConfig cfg;
  cfg.hidden_size = 2048;
  cfg.num_heads = 16;
  cfg.head_dim = 128;
  cfg.q_rank = 6;
  cfg.k_rank = cfg.v_rank = 2;
  const std::size_t d = cfg.hidden_size, h = cfg.num_heads, d_h = cfg.head_dim;
  const auto length = static_cast<std::size_t>(state.range(0));
  auto factor_map = [&](int rank, std::uint64_t seed) {
    const auto r = static_cast<std::size_t>(rank);
    return TpaFactorMap{layer_weight(d, r * h, seed), Tensor2::from_shape({0, 0}), layer_weight(d, r * d_h, seed + 1)};
  };
  const TpaWeights w{factor_map(cfg.q_rank, 71), factor_map(cfg.k_rank, 73), factor_map(cfg.v_rank, 75),
                     layer_weight(h * d_h, d, 77)};
  const Tensor2 x = uniform_matrix(1, d, 78);
  TpaCache cache(cfg);
  cache.a_k = uniform_tensor(cfg.k_rank, length, h, 81);
  cache.b_k = uniform_tensor(cfg.k_rank, length, d_h, 82);
  cache.a_v = uniform_tensor(cfg.v_rank, length, h, 83);
  cache.b_v = uniform_tensor(cfg.v_rank, length, d_h, 84);
  time_layer_step(
      state, cache, d, [&](TpaCache& c) { return layer(x, w, cfg, c); },
      [&](TpaCache& c) { return ref::tensor_product_attention(x, w, cfg, c); },
      static_cast<double>(tpa_cache_floats_per_token(cfg)));
}

void register_layer_benchmarks() {
  for (const std::int64_t length : kLayerContexts) {
    const auto arg = [=](benchmark::internal::Benchmark* b) {
      b->Arg(length)->ArgNames({"length"})->Unit(benchmark::kMillisecond);
    };
    for (const bool optimized : {false, true}) {
      const std::string side = optimized ? "opt" : "ref";
      const MlaLayer naive = optimized ? &opt::mla_naive : &ref::mla_naive;
      const MlaLayer absorbed = optimized ? &opt::mla_absorbed : &ref::mla_absorbed;
      const TpaLayer tpa = optimized ? &opt::tensor_product_attention : &ref::tensor_product_attention;
      add_benchmark("mla_layer_naive_" + side,
                    [=](benchmark::State& state) { mla_layer(state, MlaPath::naive, naive, &ref::mla_naive); }, arg);
      add_benchmark("mla_layer_absorbed_" + side,
                    [=](benchmark::State& state) { mla_layer(state, MlaPath::absorbed, absorbed, &ref::mla_absorbed); },
                    arg);
      add_benchmark("tpa_layer_" + side, [=](benchmark::State& state) { tpa_layer(state, tpa); }, arg);
    }
  }
}

// ---- after the anonymous namespace, called at the end of register_benchmarks() ----

void register_cuda_decode_benchmarks() {
  add_device_benchmark("cuda_gqa_decode", cuda_gqa_decode, [](benchmark::internal::Benchmark* b) {
    b->ArgNames({"g", "length"})->ArgsProduct({{32, 8, 1}, {1024, 4096, 32768, 131072}});
  });
  add_device_benchmark("cuda_paged_decode", cuda_paged_decode, [](benchmark::internal::Benchmark* b) {
    b->ArgNames({"g", "length"})->ArgsProduct({{8}, {4096, 32768, 131072}});
  });
  add_device_benchmark("cuda_mla_decode", cuda_mla_decode, [](benchmark::internal::Benchmark* b) {
    b->ArgNames({"length"})->ArgsProduct({{1024, 4096, 32768}});
  });
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
  register_paged_and_mla_benchmarks();
  register_paged_storage_benchmarks();
  register_cuda_decode_benchmarks();
  register_gqa_attention_benchmarks();
  register_layer_benchmarks();
}

}  // namespace tvlab::bench
