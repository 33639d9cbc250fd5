// Chapter 06's benchmarks: causal linear attention (elu+1 features, normalised, 8 heads, d = d_v =
// 64 and 128) over T = 256 to 32768 positions, against chapter 04's flash attention (causal) on
// the same q, k, v, and OpenBLAS SGEMM measured in the same run. Linear attention's work grows as
// T, softmax attention's as T^2: the times cross at some length, which these figures find.
//
// - linear_ref_recurrent: the reference (double loops), up to T = 1024;
// - linear_opt_recurrent: the recurrence, token by token (SIMD rank-1 updates);
// - linear_opt_parallel: the masked quadratic form on SGEMMs, up to T = 4096;
// - linear_opt_chunked: chunks of C = 16, 32, 64, 128 on SGEMMs (also at T = 64 and 128);
// - flash_opt_causal: `opt::flash_attention_forward`, mask causal (also at T = 64 and 128);
// - linear_opt_identity_unnormalised: the recurrence (C = 0) and chunks of 64 with the identity
//   map, unnormalised, whose terms cancel: the float state's error at its largest.
//
// Then one generated token (decode) after a context of 1K, 8K and 32K positions: linear
// attention's step reads a state of fixed size, m (d_v + 1) floats per head, whatever the
// context; softmax attention's step (chapter 05's `opt::gqa_decode_attention`, g = h = 8) reads a
// KV cache that grows with it.
//
// Every result is validated against the reference before it is timed; `max_err` reports the
// largest |opt - ref| found and `rel_err` that over max|ref| (the float state's cost over T positions).
//
//   build/default/chapters/bench_06_linear_attention --benchmark_counters_tabular=true

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "../common/bench_attention.hpp"
#include "../common/bench_cuda.hpp"
#include "../common/bench_support.hpp"
#include "tvlab/core/compare.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/core/xt.hpp"
#include "tvlab/cuda/delta_rule.hpp"
#include "tvlab/cuda/delta_rule_device.hpp"
#include "tvlab/cuda/linear_attention.hpp"
#include "tvlab/cuda/linear_attention_device.hpp"
#include "tvlab/opt/delta_rule.hpp"
#include "tvlab/opt/flash_attention.hpp"
#include "tvlab/opt/gqa_decode.hpp"
#include "tvlab/opt/linear_attention.hpp"
#include "tvlab/opt/performer.hpp"
#include "tvlab/ref/delta_rule.hpp"
#include "tvlab/ref/flash_attention.hpp"
#include "tvlab/ref/gqa_decode.hpp"
#include "tvlab/ref/linear_attention.hpp"
#include "tvlab/ref/performer.hpp"

namespace tvlab::bench {
namespace {

using Benchmark = benchmark::internal::Benchmark;
constexpr std::size_t kHeads = 8;

// ------------------------------------------------------------------ FLOP counts, per call
//
// Multiply-adds of the matrix products, 2 flops each; the feature map and the normaliser
// (O(T m) per head, 1/d_v of the rest) are not counted. m = d_k = d_v = d.

// Recurrent: per token and head, S += phi(k) v^T (m d_v multiply-adds) and o = phi(q)^T S (m d_v).
double recurrent_flops(std::size_t n, std::size_t d) { return 4.0 * static_cast<double>(kHeads * n * d * d); }

// Chunked, C dividing T: per chunk, phi(Q_c) phi(K_c)^T (C^2 m, the whole block as the SGEMM
// computes it, masked half included) and A V_c (C^2 d_v): 2 T C (m + d_v) over the T/C chunks;
// phi(Q_c) S (C m d_v) and S += phi(K_c)^T V_c (C m d_v): 4 T m d_v.
double chunked_flops(std::size_t n, std::size_t d, std::size_t chunk) {
  const double c = static_cast<double>(std::min(chunk, n));
  return static_cast<double>(kHeads) * (2.0 * static_cast<double>(n) * c * 2.0 * static_cast<double>(d) +
                                        4.0 * static_cast<double>(n * d * d));
}

// Parallel, in blocks of B = 64 rows: block b forms A against keys 0..(b+1)B, m and d_v
// multiply-adds per entry: about T (T + B) (m + d_v) flops.
double parallel_flops(std::size_t n, std::size_t d) {
  return static_cast<double>(kHeads) * static_cast<double>(n) * static_cast<double>(n + 64) * 2.0 * static_cast<double>(d);
}

// Softmax attention, causal: chapter 04's count, 4 T^2 d per head, halved by the mask.
double flash_flops(std::size_t n, std::size_t d) { return 2.0 * static_cast<double>(kHeads * n * n * d); }

// ------------------------------------------------------------------ inputs and the reference

// The positions validated against the reference: the outputs up to t of a causal form depend on
// the positions up to t alone, and the reference takes seconds at T = 16384.
constexpr std::size_t kLinearValidated = 16384;

// The first `n` positions of x [h, T, .].
Tensor3 first_positions(const Tensor3& x, std::size_t n) { return xt::view(x, xt::all(), xt::range(0, n), xt::all()); }

// q, k, v ~ N(0, 1) [8, T, d] and the reference's causal output on the first min(T, 16384)
// positions, kept for every shape (every benchmark of a shape shares it; all of them together hold
// about 1 GB).
struct Prefill {
  std::size_t n = 0, d = 0;
  LinearAttentionConfig cfg;
  Tensor3 q, k, v;
  Tensor3 expected;  // ref::causal_linear_attention_recurrent from an empty state, [8, min(T, 16384), d]
};

// The chapter's case, elu+1 features and normalised outputs (weighted averages of the values);
// or the identity map unnormalised, o_i = sum_{j <= i} (q_i . k_j) v_j, whose terms have both
// signs and cancel: the float state's error is then largest relative to the output.
LinearAttentionConfig config_of(bool identity_unnormalised) {
  LinearAttentionConfig cfg;
  if (identity_unnormalised) {
    cfg.feature_map = FeatureMap::identity;
    cfg.normalize = false;
  }
  return cfg;
}

const Prefill& prefill_for(std::size_t n, std::size_t d, bool identity_unnormalised = false) {
  static std::map<std::tuple<std::size_t, std::size_t, bool>, Prefill> shapes;
  Prefill& held = shapes[{n, d, identity_unnormalised}];
  if (held.n == n && held.d == d) return held;
  Rng rng(606 + n + d);
  held.cfg = config_of(identity_unnormalised);
  held.q = rng.normal_tensor(kHeads, n, d);
  held.k = rng.normal_tensor(kHeads, n, d);
  held.v = rng.normal_tensor(kHeads, n, d);
  LinearAttentionState empty(kHeads, d, d);
  const std::size_t m = std::min(n, kLinearValidated);
  held.expected = ref::causal_linear_attention_recurrent(first_positions(held.q, m), first_positions(held.k, m),
                                                         first_positions(held.v, m), held.cfg, empty);
  held.n = n;
  held.d = d;
  return held;
}

// The suites' tolerance: a float sum of up to n d products per output carries reduction_rtol(n d)
// of its sum of |terms|, which a normalised output (a weighted average of values) bounds by
// max|v|: atol = reduction_rtol(n d) max(1, max|ref|) + 1e-7.
Tolerance linear_tolerance(const Tensor3& expected, std::size_t terms) {
  const double rtol = reduction_rtol(terms);
  return {rtol * std::max(1.0, static_cast<double>(xt::amax(xt::abs(expected))())) + 1e-7, rtol};
}

// Validates `got` against the shape's reference (its first min(T, 16384) positions) and reports
// the largest difference as `max_err`, and that difference over max|ref| as `rel_err` (the suites'
// tolerance allows reduction_rtol(T d)).
bool validate_prefill(benchmark::State& state, const Tensor3& got, const Prefill& in) {
  const Tensor3 checked = first_positions(got, in.expected.shape()[1]);
  const double max_err = static_cast<double>(xt::amax(xt::abs(checked - in.expected))());
  state.counters["max_err"] = max_err;
  state.counters["rel_err"] = max_err / static_cast<double>(xt::amax(xt::abs(in.expected))());
  return validate(state, checked, in.expected, linear_tolerance(in.expected, in.n * in.d));
}

LinearAttentionState empty_state(std::size_t d) { return LinearAttentionState(kHeads, d, d); }

// args: T, d.
void linear_recurrent(benchmark::State& state, bool optimized) {
  const auto n = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const Prefill& in = prefill_for(n, d);
  auto run = [&] {
    LinearAttentionState s = empty_state(d);
    return optimized ? opt::causal_linear_attention_recurrent(in.q, in.k, in.v, {}, s)
                     : ref::causal_linear_attention_recurrent(in.q, in.k, in.v, {}, s);
  };
  if (!validate_prefill(state, run(), in)) return;
  for (auto _ : state) benchmark::DoNotOptimize(run());
  state.counters["GFLOP/s"] = gflops(recurrent_flops(n, d));
}

// args: T, d, C.
void linear_chunked(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const auto chunk = static_cast<std::size_t>(state.range(2));
  const Prefill& in = prefill_for(n, d);
  auto run = [&] {
    LinearAttentionState s = empty_state(d);
    return opt::causal_linear_attention_chunked(in.q, in.k, in.v, {}, chunk, s);
  };
  if (!validate_prefill(state, run(), in)) return;
  for (auto _ : state) benchmark::DoNotOptimize(run());
  state.counters["GFLOP/s"] = gflops(chunked_flops(n, d, chunk));
}

// args: T, d, C (0: the recurrence). The identity map unnormalised, for its error (`rel_err`).
void linear_identity_unnormalised(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const auto chunk = static_cast<std::size_t>(state.range(2));
  const Prefill& in = prefill_for(n, d, /*identity_unnormalised=*/true);
  auto run = [&] {
    LinearAttentionState s = empty_state(d);
    return chunk == 0 ? opt::causal_linear_attention_recurrent(in.q, in.k, in.v, in.cfg, s)
                      : opt::causal_linear_attention_chunked(in.q, in.k, in.v, in.cfg, chunk, s);
  };
  if (!validate_prefill(state, run(), in)) return;
  for (auto _ : state) benchmark::DoNotOptimize(run());
  state.counters["GFLOP/s"] = gflops(chunk == 0 ? recurrent_flops(n, d) : chunked_flops(n, d, chunk));
}

// args: T, d.
void linear_parallel(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const Prefill& in = prefill_for(n, d);
  auto run = [&] { return opt::causal_linear_attention_parallel(in.q, in.k, in.v, {}); };
  if (!validate_prefill(state, run(), in)) return;
  for (auto _ : state) benchmark::DoNotOptimize(run());
  state.counters["GFLOP/s"] = gflops(parallel_flops(n, d));
}

// Chapter 04's headline flash attention, causal, scale 1/sqrt(d), on the same q, k, v; validated
// as chapter 04 validates it, on its last rows against the reference.
void flash_causal(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const Prefill& in = prefill_for(n, d);
  FlashConfig cfg;
  cfg.mask.causal = true;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  auto run = [&] { return opt::flash_attention_forward(in.q, in.k, in.v, cfg); };
  if (!validate_attention(state, run().out, in.q,
                          [&](const Tensor3& q_rows) { return ref::flash_attention_forward(q_rows, in.k, in.v, cfg).out; },
                          attention_output_tolerance(in.q, in.k, in.v, scale)))
    return;
  for (auto _ : state) benchmark::DoNotOptimize(run());
  state.counters["GFLOP/s"] = gflops(flash_flops(n, d));
}

// ------------------------------------------------------------------ decode

// Uniform values in [-1, 1) from a 64-bit xorshift, as chapter 05's caches (the normal generator
// would take seconds for a 32K cache).
Tensor3 uniform_tensor(std::size_t a, std::size_t b, std::size_t c, std::uint64_t state) {
  Tensor3 x = Tensor3::from_shape({a, b, c});
  for (std::size_t i = 0; i < x.size(); ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    x.data()[i] = static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-52 - 1.0);
  }
  return x;
}

// A context of L positions, kept for every shape (about 0.6 GB in all): its keys and values (the KV
// cache softmax attention reads), the linear-attention state they sum to, and the new token's q, k, v.
struct Context {
  std::size_t length = 0, d = 0;
  Tensor3 k, v;                 // [8, L, d]
  LinearAttentionState state;   // S, z after the L positions
  Tensor3 q_new, k_new, v_new;  // [8, 1, d]
};
const Context& context_for(std::size_t length, std::size_t d) {
  static std::map<std::pair<std::size_t, std::size_t>, Context> shapes;
  Context& held = shapes[{length, d}];
  if (held.length == length && held.d == d) return held;
  const Tensor3 q = uniform_tensor(kHeads, length, d, 61);
  held.k = uniform_tensor(kHeads, length, d, 62);
  held.v = uniform_tensor(kHeads, length, d, 63);
  held.state = empty_state(d);
  opt::causal_linear_attention_chunked(q, held.k, held.v, {}, 64, held.state);  // the prompt, once
  held.q_new = uniform_tensor(kHeads, 1, d, 64);
  held.k_new = uniform_tensor(kHeads, 1, d, 65);
  held.v_new = uniform_tensor(kHeads, 1, d, 66);
  held.length = length;
  held.d = d;
  return held;
}

// args: L, d. One token of causal linear attention from the context's state. The step updates the
// state it is given: the timed loop runs on its own copy (a sum over more and more copies of the
// same token, as long generations sum over more tokens: the same work).
void decode_linear(benchmark::State& state) {
  const auto length = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const Context& in = context_for(length, d);
  LinearAttentionState for_ref = in.state, for_opt = in.state;
  const Tensor3 expected = ref::causal_linear_attention_recurrent(in.q_new, in.k_new, in.v_new, {}, for_ref);
  // One step from the same float state: sums of m products, reduction_rtol(m) of their |terms|.
  if (!validate(state, opt::causal_linear_attention_recurrent(in.q_new, in.k_new, in.v_new, {}, for_opt), expected,
                linear_tolerance(expected, d)))
    return;
  LinearAttentionState timed = in.state;
  for (auto _ : state) benchmark::DoNotOptimize(opt::causal_linear_attention_recurrent(in.q_new, in.k_new, in.v_new, {}, timed));
  // What a step reads and writes: S (m d_v floats per head) once, z (m), q, k, v of the token.
  const double state_bytes = static_cast<double>(kHeads * (d * d + d) * sizeof(float));
  state.counters["state_KiB"] = state_bytes / 1024;
  state.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
}

// args: L, d. One token of softmax attention over the KV cache of L positions (chapter 05, h = g =
// 8), validated as chapter 05 validates it, on the first min(L, 4096) positions.
void decode_softmax(benchmark::State& state) {
  const auto length = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const Context& in = context_for(length, d);
  const Tensor2 q = xt::view(in.q_new, xt::all(), 0, xt::all());
  const std::size_t n = std::min<std::size_t>(length, 4096);
  // attention_tolerance with the score bound M <= sqrt(d) (|q|, |k| < 1, scale 1/sqrt(d))
  const Tolerance tol{attention_tolerance(d, n, std::sqrt(static_cast<double>(d)), 1.0), 2 * reduction_rtol(std::max(d, n))};
  if (!validate(state, opt::gqa_decode_attention(q, in.k, in.v, n).out, ref::gqa_decode_attention(q, in.k, in.v, n).out, tol))
    return;
  for (auto _ : state) benchmark::DoNotOptimize(opt::gqa_decode_attention(q, in.k, in.v, length));
  const double cache_bytes = static_cast<double>(kHeads * length * 2 * d * sizeof(float));
  state.counters["cache_MiB"] = cache_bytes / (1 << 20);
  state.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

void register_delta_rule_benchmarks();
void register_performer_benchmarks();
void register_cuda_benchmarks();

void register_benchmarks() {
  add_openblas_sgemm({1024});
  const std::vector<std::int64_t> lengths{256, 1024, 4096, 16384, 32768}, dims{64, 128};
  // Shorter ones too for the chunked form and flash attention, to find where their times cross.
  const std::vector<std::int64_t> all_lengths{64, 128, 256, 1024, 4096, 16384, 32768};
  add_benchmark("linear_ref_recurrent", [](benchmark::State& s) { linear_recurrent(s, false); },
                [](Benchmark* b) { b->ArgNames({"T", "d"})->ArgsProduct({{256, 1024}, {64, 128}}); });
  add_benchmark("linear_opt_recurrent", [](benchmark::State& s) { linear_recurrent(s, true); },
                [&](Benchmark* b) { b->ArgNames({"T", "d"})->ArgsProduct({lengths, dims}); });
  add_benchmark("linear_opt_parallel", linear_parallel,
                [](Benchmark* b) { b->ArgNames({"T", "d"})->ArgsProduct({{256, 1024, 4096}, {64, 128}}); });
  add_benchmark("linear_opt_chunked", linear_chunked,
                [&](Benchmark* b) { b->ArgNames({"T", "d", "C"})->ArgsProduct({all_lengths, dims, {16, 32, 64, 128}}); });
  // Not at 32K: 14 s a call at d = 128, four times the 16K figure (its work is quadratic).
  const std::vector<std::int64_t> flash_lengths(all_lengths.begin(), all_lengths.end() - 1);
  add_benchmark("flash_opt_causal", flash_causal,
                [&](Benchmark* b) { b->ArgNames({"T", "d"})->ArgsProduct({flash_lengths, dims}); });
  add_benchmark("linear_opt_identity_unnormalised", linear_identity_unnormalised,
                [](Benchmark* b) { b->ArgNames({"T", "d", "C"})->ArgsProduct({{1024, 16384}, {64}, {0, 64}}); });
  const std::vector<std::int64_t> contexts{1024, 8192, 32768};
  add_benchmark("decode_linear_opt_recurrent", decode_linear, [&](Benchmark* b) {
    b->ArgNames({"L", "d"})->ArgsProduct({contexts, dims})->Unit(benchmark::kMicrosecond);
  });
  add_benchmark("decode_softmax_opt_gqa", decode_softmax, [&](Benchmark* b) {
    b->ArgNames({"L", "d"})->ArgsProduct({contexts, dims})->Unit(benchmark::kMicrosecond);
  });
  benchmark::AddCustomContext("heads", "8");
  benchmark::AddCustomContext("feature_map", "elu_plus_one, normalised");
  register_delta_rule_benchmarks();
  register_performer_benchmarks();
  register_cuda_benchmarks();
}

// ------------------------------------------------------------------ the delta rule
//
// Gated DeltaNet (the delta rule, a scalar gate, q and k L2-normalised) and KDA (the same with a
// per-channel gate), 8 heads, d_k = d_v = d in {64, 128}:
// - delta_ref_recurrent: `ref::delta_rule_recurrent` (double loops), up to T = 4096;
// - delta_opt_recurrent: `opt::delta_rule_recurrent`, token by token;
// - delta_opt_chunked: `opt::delta_rule_chunked`, chunks of C = 16, 32, 64;
// - kda_*: the same three for KDA;
// - decode_delta_opt_recurrent: one generated token of Gated DeltaNet after a context of 1K, 8K and
//   32K positions, beside decode_linear_opt_recurrent and decode_softmax_opt_gqa above.
// Every result is validated against the reference's recurrence before it is timed, on the first
// min(T, 4096) positions: the outputs of a causal recurrence up to t depend on positions up to t
// alone, and the reference takes 4 s for 4096 positions at d = 128 (it would take a minute at 32K).

namespace {

constexpr std::size_t kDeltaValidated = 4096;

// Per token and head: the prediction S^T k, the rank-1 update k u^T and the readout S^T q, d_k d_v
// multiply-adds each: 6 d_k d_v flops (the decay's d_k d_v multiplications are not counted).
double delta_recurrent_flops(std::size_t n, std::size_t d) { return 6.0 * static_cast<double>(kHeads * n * d * d); }

// Chunked, per chunk of C positions (d_k = d_v = d), the products as the SGEMMs compute them (masked
// halves included): K K^T and Q K^T, 2 C^2 d_k each; the triangular solve, C^2 d_v (counted as a solve
// would do it: the product with the UT transform's T that opt:: uses does twice that); W = V - (K o e^G) S_0,
// 2 C d_k d_v; O = (Q o e^G) S_0 + P U, 2 C d_k d_v + 2 C^2 d_v; the state (K o e^{G_C - G})^T U,
// 2 C d_k d_v: 6 C d^2 + 7 C^2 d per chunk, over T / C chunks. (With KDA's per-channel gate the
// products A and P are loops over pairs, the same count.)
double delta_chunked_flops(std::size_t n, std::size_t d, std::size_t chunk) {
  const double c = static_cast<double>(std::min(chunk, n)), dd = static_cast<double>(d);
  return static_cast<double>(kHeads) * static_cast<double>(n) / c * (6.0 * c * dd * dd + 7.0 * c * c * dd);
}

// Gated DeltaNet's or KDA's inputs: q, k, v ~ N(0, 1) [8, T, d], beta ~ U[0, 1), log gates log(alpha)
// with alpha ~ U[0.9, 1) (one per head and token, or one per channel too), and the reference's
// outputs on the first min(T, 4096) positions (its recurrence, from a zero state), kept per shape.
struct DeltaPrefill {
  std::size_t n = 0, d = 0;
  Tensor3 q, k, v;
  Tensor2 beta;
  DeltaRuleGate gate;
  DeltaRuleConfig cfg;
  Tensor3 expected;  // [8, min(T, 4096), d]
};

// The first `n` positions of a [h, T] tensor (beta, a scalar gate).
Tensor2 first_positions(const Tensor2& x, std::size_t n) { return xt::view(x, xt::all(), xt::range(0, n)); }

const DeltaPrefill& delta_prefill_for(std::size_t n, std::size_t d, bool per_channel) {
  static std::map<std::tuple<std::size_t, std::size_t, bool>, DeltaPrefill> shapes;
  DeltaPrefill& held = shapes[{n, d, per_channel}];
  if (held.n == n && held.d == d) return held;
  Rng rng(616 + n + d);
  held.q = rng.normal_tensor(kHeads, n, d);
  held.k = rng.normal_tensor(kHeads, n, d);
  held.v = rng.normal_tensor(kHeads, n, d);
  held.beta = Tensor2::from_shape({kHeads, n});
  for (auto& b : held.beta) b = static_cast<float>(rng.uniform());
  if (per_channel) {
    held.gate.per_channel = Tensor3::from_shape({kHeads, n, d});
    for (auto& g : held.gate.per_channel) g = static_cast<float>(std::log(rng.uniform(0.9, 1.0)));
  } else {
    held.gate.scalar = Tensor2::from_shape({kHeads, n});
    for (auto& g : held.gate.scalar) g = static_cast<float>(std::log(rng.uniform(0.9, 1.0)));
  }
  held.cfg.l2_normalize_qk = true;
  const std::size_t m = std::min(n, kDeltaValidated);
  DeltaRuleGate prefix_gate;
  if (per_channel)
    prefix_gate.per_channel = first_positions(held.gate.per_channel, m);
  else
    prefix_gate.scalar = first_positions(held.gate.scalar, m);
  held.expected = ref::delta_rule_recurrent(first_positions(held.q, m), first_positions(held.k, m),
                                            first_positions(held.v, m), first_positions(held.beta, m), prefix_gate,
                                            held.cfg)
                      .o;
  held.n = n;
  held.d = d;
  return held;
}

// The tests' tolerance (delta_rule_suite_test.cpp): float sums of T d products, reduction_rtol(T d) of
// the outputs' scale, here per element against max|ref|; `rel_err` reports max|opt - ref| / max|ref|
// over the validated positions.
bool validate_delta(benchmark::State& state, const Tensor3& got, const DeltaPrefill& in) {
  const Tensor3 checked = first_positions(got, in.expected.shape()[1]);
  const double max_ref = static_cast<double>(xt::amax(xt::abs(in.expected))());
  const double max_err = static_cast<double>(xt::amax(xt::abs(checked - in.expected))());
  state.counters["rel_err"] = max_err / max_ref;
  const double rtol = reduction_rtol(in.n * in.d);
  return validate(state, checked, in.expected, Tolerance{rtol * max_ref + 1e-7, rtol});
}

// args: T, d.
void delta_recurrent(benchmark::State& state, bool optimized, bool per_channel) {
  const auto n = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const DeltaPrefill& in = delta_prefill_for(n, d, per_channel);
  auto run = [&] {
    return optimized ? opt::delta_rule_recurrent(in.q, in.k, in.v, in.beta, in.gate, in.cfg)
                     : ref::delta_rule_recurrent(in.q, in.k, in.v, in.beta, in.gate, in.cfg);
  };
  if (!validate_delta(state, run().o, in)) return;
  for (auto _ : state) benchmark::DoNotOptimize(run());
  state.counters["GFLOP/s"] = gflops(delta_recurrent_flops(n, d));
}

// args: T, d, C.
void delta_chunked(benchmark::State& state, bool per_channel) {
  const auto n = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const auto chunk = static_cast<std::size_t>(state.range(2));
  const DeltaPrefill& in = delta_prefill_for(n, d, per_channel);
  auto run = [&] { return opt::delta_rule_chunked(in.q, in.k, in.v, in.beta, in.gate, in.cfg, chunk); };
  if (!validate_delta(state, run().o, in)) return;
  for (auto _ : state) benchmark::DoNotOptimize(run());
  state.counters["GFLOP/s"] = gflops(delta_chunked_flops(n, d, chunk));
}

// args: L, d. One token of Gated DeltaNet after a context of L positions: the state the context
// leaves (computed once, in chunks of 32), then the step from it, validated against the reference's
// step from the same state. The timed loop feeds every step the context's state, as a decode step
// that carries its state forward does the same work.
void decode_delta(benchmark::State& state) {
  const auto length = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const Context& ctx = context_for(length, d);
  DeltaRuleConfig cfg;
  cfg.l2_normalize_qk = true;
  Tensor2 beta = Tensor2::from_shape({kHeads, length}), new_beta = Tensor2::from_shape({kHeads, 1});
  beta.fill(0.5f);
  new_beta.fill(0.5f);
  DeltaRuleGate gate, new_gate;
  gate.scalar = Tensor2::from_shape({kHeads, length});
  gate.scalar.fill(std::log(0.99f));
  new_gate.scalar = Tensor2::from_shape({kHeads, 1});
  new_gate.scalar.fill(std::log(0.99f));
  static std::map<std::pair<std::size_t, std::size_t>, Tensor3> states;  // the context's state, per shape
  Tensor3& context_state = states[{length, d}];
  if (context_state.size() == 0) {
    const Tensor3 q = uniform_tensor(kHeads, length, d, 67);
    context_state = opt::delta_rule_chunked(q, ctx.k, ctx.v, beta, gate, cfg, 32).state;
  }
  auto step = [&](bool optimized) {
    return optimized ? opt::delta_rule_recurrent(ctx.q_new, ctx.k_new, ctx.v_new, new_beta, new_gate, cfg, context_state)
                     : ref::delta_rule_recurrent(ctx.q_new, ctx.k_new, ctx.v_new, new_beta, new_gate, cfg, context_state);
  };
  const Tensor3 expected = step(false).o;
  // One step from the same float state: sums of d_k products, reduction_rtol(d) of their |terms|.
  if (!validate(state, step(true).o, expected, linear_tolerance(expected, d))) return;
  for (auto _ : state) benchmark::DoNotOptimize(step(true));
  const double state_bytes = static_cast<double>(kHeads * d * d * sizeof(float));
  state.counters["state_KiB"] = state_bytes / 1024;
  state.counters["tokens/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

// Registered after the linear-attention benchmarks (and the SGEMM they are compared with).
void register_delta_rule_benchmarks() {
  const std::vector<std::int64_t> dims{64, 128};
  // From 64 positions, to find where the times cross flash attention's (flash_opt_causal).
  const std::vector<std::int64_t> lengths{64, 128, 256, 1024, 4096, 16384, 32768};
  for (const bool kda : {false, true}) {
    const std::string family = kda ? "kda" : "delta";
    add_benchmark(family + "_ref_recurrent", [kda](benchmark::State& s) { delta_recurrent(s, false, kda); },
                  [&](Benchmark* b) { b->ArgNames({"T", "d"})->ArgsProduct({{256, 1024, 4096}, dims}); });
    add_benchmark(family + "_opt_recurrent", [kda](benchmark::State& s) { delta_recurrent(s, true, kda); },
                  [&](Benchmark* b) { b->ArgNames({"T", "d"})->ArgsProduct({lengths, dims}); });
    add_benchmark(family + "_opt_chunked", [kda](benchmark::State& s) { delta_chunked(s, kda); }, [&](Benchmark* b) {
      b->ArgNames({"T", "d", "C"})->ArgsProduct({lengths, dims, {16, 32, 64}});
    });
  }
  add_benchmark("decode_delta_opt_recurrent", decode_delta, [&](Benchmark* b) {
    b->ArgNames({"L", "d"})->ArgsProduct({{1024, 8192, 32768}, dims})->Unit(benchmark::kMicrosecond);
  });
}

// ------------------------------------------------------------------ the Performer
//
// Performer attention (FAVOR+), 8 heads, d = d_v = 64, m = 256 orthogonal random features (drawn
// once, seed 606), q, k, v ~ N(0, 1), non-causal and causal, T = 1024 and 4096:
// - performer_ref: `ref::performer_attention` (double loops, one std::exp per feature);
// - performer_opt: `opt::performer_attention` (exponents by SGEMM, xsimd's exp, SGEMMs, the causal
//   form in chunks of 64).
// Both are validated against the reference's output (computed once per shape) before they are
// timed; `max_err` and `rel_err` as above.

namespace {

constexpr std::size_t kPerformerDim = 64, kPerformerFeatures = 256;

// Multiply-adds, 2 flops each, per head: the exponents of the queries and keys, omega_r . x for m
// features of width d (2 T m d each), S = phi(K)^T V and the readouts phi(q_i)^T S (2 T m d_v each):
// 4 T m (d + d_v), causal or not. The optimized causal form's products within each chunk, about
// 2 T C (m + d_v) more, are not counted (the reference's running sums do not need them); the
// normalisers (1/d_v of the readouts) neither.
double performer_flops(std::size_t n) {
  return static_cast<double>(kHeads) * 4.0 * static_cast<double>(n * kPerformerFeatures * 2 * kPerformerDim);
}

struct PerformerCase {
  Tensor3 q, k, v;
  PerformerFeatures features;
  Tensor3 expected;  // ref::performer_attention
  Tolerance tol;
};

// The tolerance of performer_suite_test.cpp: a feature exp(e - shift) carries the float errors of
// its exponent and shift, each within reduction_rtol(d) E with E = |omega| |x^| + |x^|^2/2 at most
// (Cauchy-Schwarz bounds the sum of |omega_c x^_c|), and the exp's 2 ulps: delta = 2 rtol(d) E + 2 eps;
// the weights phi(q) . phi(k) then 2 delta, which move a weighted average of values by 4 delta
// max|v|; the float sums over keys and features add 2 reduction_rtol(T + m) max|v|.
Tolerance performer_tolerance(const PerformerCase& c) {
  const double d = static_cast<double>(kPerformerDim);
  double largest_w = 0.0, largest_x = 0.0;
  for (std::size_t r = 0; r < kPerformerFeatures; ++r)
    largest_w = std::max(largest_w, std::sqrt(static_cast<double>(xt::sum(xt::square(xt::row(c.features.w, r)))())));
  for (const Tensor3* x : {&c.q, &c.k}) {
    const auto norms = xt::sqrt(xt::sum(xt::square(xt::cast<double>(*x)), {2}));
    largest_x = std::max(largest_x, static_cast<double>(xt::amax(norms)()) / std::pow(d, 0.25));
  }
  const double magnitude = largest_w * largest_x + 0.5 * largest_x * largest_x;
  const double delta = 2.0 * reduction_rtol(kPerformerDim) * magnitude + 2.0 * FLT_EPSILON;
  const double max_v = static_cast<double>(xt::amax(xt::abs(c.v))());
  return {(4.0 * delta + 2.0 * reduction_rtol(c.k.shape()[1] + kPerformerFeatures)) * max_v + 1e-7, 0.0};
}

const PerformerCase& performer_case(std::size_t n, bool causal) {
  static std::map<std::pair<std::size_t, bool>, PerformerCase> cases;
  PerformerCase& c = cases[{n, causal}];
  if (c.expected.size() != 0) return c;
  Rng rng(606 + n);
  c.q = rng.normal_tensor(kHeads, n, kPerformerDim);
  c.k = rng.normal_tensor(kHeads, n, kPerformerDim);
  c.v = rng.normal_tensor(kHeads, n, kPerformerDim);
  c.features = ref::draw_performer_features(kPerformerFeatures, kPerformerDim, RandomFeatureKind::orthogonal,
                                            RowNorms::chi, 606);
  c.tol = performer_tolerance(c);
  c.expected = ref::performer_attention(c.q, c.k, c.v, c.features, causal);
  return c;
}

// args: T, causal (0 or 1).
void performer(benchmark::State& state, bool optimized) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const bool causal = state.range(1) != 0;
  const PerformerCase& c = performer_case(n, causal);
  auto run = [&] {
    return optimized ? opt::performer_attention(c.q, c.k, c.v, c.features, causal)
                     : ref::performer_attention(c.q, c.k, c.v, c.features, causal);
  };
  const Tensor3 got = run();
  const double max_err = static_cast<double>(xt::amax(xt::abs(got - c.expected))());
  state.counters["max_err"] = max_err;
  state.counters["rel_err"] = max_err / static_cast<double>(xt::amax(xt::abs(c.expected))());
  if (!validate(state, got, c.expected, c.tol)) return;
  for (auto _ : state) benchmark::DoNotOptimize(run());
  state.counters["GFLOP/s"] = gflops(performer_flops(n));
}

}  // namespace

// Registered after the delta rule's benchmarks.
void register_performer_benchmarks() {
  for (const bool optimized : {false, true})
    add_benchmark(optimized ? "performer_opt" : "performer_ref",
                  [optimized](benchmark::State& s) { performer(s, optimized); },
                  [](Benchmark* b) { b->ArgNames({"T", "causal"})->ArgsProduct({{1024, 4096}, {0, 1}}); });
}

// ------------------------------------------------------------------ on a CUDA device
//
// Registered only where a device is present (otherwise listed as not timed, with the reason); the
// device's work alone is timed (CUDA events, an L2 flush between repeats), inputs already on it:
// - cuda_linear_recurrent / cuda_linear_chunked: causal linear attention (elu+1, normalised) token
//   by token, and in chunks of 64;
// - cuda_delta_chunked / cuda_kda_chunked: Gated DeltaNet and KDA in chunks of 32 and 64;
// - cuda_decode_linear / cuda_decode_delta: one generated token from a state (linear attention,
//   Gated DeltaNet), as the CPU's decode_* benchmarks.
// Every result is first computed through the host-tensor entry point and validated against the
// reference as the CPU benchmarks are. A timed kernel updates its state in place, so repeats start
// from the state the previous one left: the same work (normalised outputs; the delta rule's state
// stays bounded with normalised keys).

namespace {

// A linear-attention call's inputs on the device, a zero state and the output to write.
struct DeviceLinear {
  cuda::DeviceBuffer<float> q, k, v, s, z, z_out, out;
  cuda::DeviceBuffer<int> fault;
  cuda::device::LinearAttentionArgs args;

  DeviceLinear(const Tensor3& q_host, const Tensor3& k_host, const Tensor3& v_host, std::size_t chunk)
      : q(to_device(q_host)), k(to_device(k_host)), v(to_device(v_host)),
        s(q_host.shape()[0] * q_host.shape()[2] * v_host.shape()[2]), z(q_host.shape()[0] * q_host.shape()[2]),
        z_out(z.size()), out(v_host.size()), fault(1) {
    cuda::device::fill_bytes(s.get(), 0, s.size() * sizeof(float));
    cuda::device::fill_bytes(z.get(), 0, z.size() * sizeof(float));
    cuda::device::fill_bytes(fault.get(), 0, sizeof(int));
    args = {.q = q.get(), .k = k.get(), .v = v.get(), .s = s.get(), .z = z.get(), .z_out = z_out.get(), .out = out.get(),
            .fault = fault.get(), .heads = q_host.shape()[0], .n = q_host.shape()[1], .m = q_host.shape()[2],
            .d_v = v_host.shape()[2], .chunk_size = chunk};
  }
};

// args: T, d, C (0: the recurrence).
void cuda_linear(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const auto chunk = static_cast<std::size_t>(state.range(2));
  const Prefill& in = prefill_for(n, d);
  LinearAttentionState host_state = empty_state(d);
  const Tensor3 got = chunk == 0 ? cuda::causal_linear_attention_recurrent(in.q, in.k, in.v, {}, host_state)
                                 : cuda::causal_linear_attention_chunked(in.q, in.k, in.v, {}, chunk, host_state);
  if (!validate_prefill(state, got, in)) return;
  DeviceLinear dev(in.q, in.k, in.v, std::min(chunk, n));
  time_on_device(state, [&] { cuda::device::causal_linear_attention(dev.args); });
  state.counters["GFLOP/s"] = gflops(chunk == 0 ? recurrent_flops(n, d) : chunked_flops(n, d, chunk));
}

// A delta-rule call's inputs on the device, its workspace, the state (`s0`, or zeros) and the output.
struct DeviceDelta {
  cuda::DeviceBuffer<float> q, k, v, beta, gate, q_rows, k_rows, s, out;
  cuda::DeviceBuffer<int> fault;
  cuda::device::DeltaRuleArgs args;

  DeviceDelta(const Tensor3& q_host, const Tensor3& k_host, const Tensor3& v_host, const Tensor2& beta_host,
              const DeltaRuleGate& g, const DeltaRuleConfig& cfg, const Tensor3& s0, std::size_t chunk)
      : q(to_device(q_host)), k(to_device(k_host)), v(to_device(v_host)), beta(beta_host.data(), beta_host.size()),
        gate(g.per_channel.size() ? cuda::DeviceBuffer<float>(g.per_channel.data(), g.per_channel.size())
                                  : cuda::DeviceBuffer<float>(g.scalar.data(), g.scalar.size())),
        q_rows(q_host.size()), k_rows(k_host.size()), s(q_host.shape()[0] * q_host.shape()[2] * v_host.shape()[2]),
        out(v_host.size()), fault(1) {
    if (s0.size() != 0)
      s.upload(s0.data());
    else
      cuda::device::fill_bytes(s.get(), 0, s.size() * sizeof(float));
    cuda::device::fill_bytes(fault.get(), 0, sizeof(int));
    const std::size_t d_k = q_host.shape()[2];
    args = {.q = q.get(), .k = k.get(), .v = v.get(), .beta = beta.get(), .gate = gate.get(),
            .per_channel_gate = g.per_channel.size() != 0, .q_rows = q_rows.get(), .k_rows = k_rows.get(),
            .state = s.get(), .out = out.get(), .fault = fault.get(), .heads = q_host.shape()[0],
            .n = q_host.shape()[1], .d_k = d_k, .d_v = v_host.shape()[2], .delta = cfg.delta,
            .l2_normalize_qk = cfg.l2_normalize_qk,
            .scale = static_cast<float>(cfg.scale.value_or(1.0 / std::sqrt(static_cast<double>(d_k)))),
            .chunk_size = chunk};
  }
};

// args: T, d, C. Gated DeltaNet, or KDA when `per_channel`.
void cuda_delta_chunked(benchmark::State& state, bool per_channel) {
  const auto n = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const auto chunk = static_cast<std::size_t>(state.range(2));
  const DeltaPrefill& in = delta_prefill_for(n, d, per_channel);
  if (!validate_delta(state, cuda::delta_rule_chunked(in.q, in.k, in.v, in.beta, in.gate, in.cfg, chunk).o, in)) return;
  DeviceDelta dev(in.q, in.k, in.v, in.beta, in.gate, in.cfg, Tensor3::from_shape({0, 0, 0}), std::min(chunk, n));
  time_on_device(state, [&] { cuda::device::delta_rule(dev.args); });
  state.counters["GFLOP/s"] = gflops(delta_chunked_flops(n, d, chunk));
}

// args: L, d. One token from the state of a context of L positions, as decode_linear: validated
// against the reference's step from the same state.
void cuda_decode_linear(benchmark::State& state) {
  const auto length = static_cast<std::size_t>(state.range(0)), d = static_cast<std::size_t>(state.range(1));
  const Context& in = context_for(length, d);
  LinearAttentionState for_ref = in.state, for_cuda = in.state;
  const Tensor3 expected = ref::causal_linear_attention_recurrent(in.q_new, in.k_new, in.v_new, {}, for_ref);
  if (!validate(state, cuda::causal_linear_attention_recurrent(in.q_new, in.k_new, in.v_new, {}, for_cuda), expected,
                linear_tolerance(expected, d)))
    return;
  DeviceLinear dev(in.q_new, in.k_new, in.v_new, 0);
  dev.s.upload(in.state.s.data());
  dev.z.upload(in.state.z.data());
  time_on_device(state, [&] { cuda::device::causal_linear_attention(dev.args); });
  state.counters["state_KiB"] = static_cast<double>(kHeads * (d * d + d) * sizeof(float)) / 1024;
}

// args: d. One token of Gated DeltaNet from a state S_0 ~ N(0, 0.25) (the step's work does not
// depend on how long the context was), validated against the reference's step.
void cuda_decode_delta(benchmark::State& state) {
  const auto d = static_cast<std::size_t>(state.range(0));
  Rng rng(68 + d);
  const Tensor3 q = rng.normal_tensor(kHeads, 1, d), k = rng.normal_tensor(kHeads, 1, d), v = rng.normal_tensor(kHeads, 1, d);
  const Tensor3 s0 = rng.normal_tensor(kHeads, d, d, 0.0, 0.5);
  Tensor2 beta = Tensor2::from_shape({kHeads, 1});
  beta.fill(0.5f);
  DeltaRuleGate gate;
  gate.scalar = Tensor2::from_shape({kHeads, 1});
  gate.scalar.fill(std::log(0.99f));
  DeltaRuleConfig cfg;
  cfg.l2_normalize_qk = true;
  const Tensor3 expected = ref::delta_rule_recurrent(q, k, v, beta, gate, cfg, s0).o;
  if (!validate(state, cuda::delta_rule_recurrent(q, k, v, beta, gate, cfg, s0).o, expected,
                linear_tolerance(expected, d)))
    return;
  DeviceDelta dev(q, k, v, beta, gate, cfg, s0, 0);
  time_on_device(state, [&] { cuda::device::delta_rule(dev.args); });
  state.counters["state_KiB"] = static_cast<double>(kHeads * d * d * sizeof(float)) / 1024;
}

}  // namespace

// Registered last: only where a device is present.
void register_cuda_benchmarks() {
  add_device_benchmark("cuda_linear_recurrent", cuda_linear,
                       [](Benchmark* b) { b->ArgNames({"T", "d", "C"})->ArgsProduct({{4096}, {64, 128}, {0}}); });
  add_device_benchmark("cuda_linear_chunked", cuda_linear, [](Benchmark* b) {
    b->ArgNames({"T", "d", "C"})->ArgsProduct({{4096, 16384}, {64, 128}, {64}});
  });
  for (const bool kda : {false, true})
    add_device_benchmark(kda ? "cuda_kda_chunked" : "cuda_delta_chunked",
                         [kda](benchmark::State& s) { cuda_delta_chunked(s, kda); }, [](Benchmark* b) {
                           b->ArgNames({"T", "d", "C"})->ArgsProduct({{4096, 16384}, {128}, {32, 64}});
                         });
  add_device_benchmark("cuda_decode_linear", cuda_decode_linear,
                       [](Benchmark* b) { b->ArgNames({"L", "d"})->ArgsProduct({{1024}, {64, 128}}); });
  add_device_benchmark("cuda_decode_delta", cuda_decode_delta,
                       [](Benchmark* b) { b->ArgNames({"d"})->ArgsProduct({{64, 128}}); });
}

}  // namespace tvlab::bench
