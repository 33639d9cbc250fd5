// Chapter 03's benchmarks: the sparse kernels of the chapter's registry (`<backend>_block_sparse`
// on two layouts, `<backend>_sliding_window`) against chapter 04's dense flash attention
// (`ch04_dense_flash`, the same kernel family over every key), for n = 1024 ... 32768, d = 64,
// 8 heads, with OpenBLAS SGEMM measured in the same run; and decoding with the rolling KV cache
// (`window_kv_cache_decode`), whose memory does not grow with the number of tokens.
//
//   build/default/chapters/bench_03_sparse_attention --benchmark_counters_tabular=true
//
// The two layouts (arg `layout`), with blocks of 64 x 64:
//   0  a bidirectional sliding window of radius 256 (Longformer's local attention: an interior
//      row sees 2 x 256 + 1 = 513 keys), the window every `sliding_window` benchmark runs too;
//   1  a BigBird-like layout (BigBird's ITC structure, Zaheer et al. 2020): the first and the last
//      block global (they see every block and every block sees them), every other query block its
//      3-block window and 3 random blocks drawn from the rest (seeded): 8 blocks, 512 keys a row.
//
// Counters: GFLOP/s of the attended pairs (4 d per pair and head: the useful work; the tiles also
// compute the masked entries of partial blocks), `ideal` = dense pairs / attended pairs (the
// speedup over dense attention if time were proportional to the pairs), `speedup` = the dense flash
// kernel's time at the same n / this time, `of_ideal` = speedup / ideal, and `extra_MiB`, the peak
// heap a call allocates beyond its output. The dense time is the `ch04_dense_flash` measurement
// of this run (measured once here when that benchmark is filtered out).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <vector>

#include "../common/bench_attention.hpp"
#include "../common/bench_memory.hpp"
#include "../common/bench_support.hpp"
#include "backends.hpp"
#include "tvlab/core/attention_patterns.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/opt/flash_attention.hpp"
#include "tvlab/opt/window_kv_cache.hpp"
#include "tvlab/ref/sparse_attention.hpp"

namespace tvlab::bench {
namespace {

using sparse::Backend;
using Benchmark = benchmark::internal::Benchmark;
constexpr std::size_t kHeads = 8, kHeadDim = 64, kBlock = 64;
constexpr long long kRadius = 256;  // the window: keys i - 256 .. i + 256
const std::vector<std::int64_t> kLengths = {1024, 2048, 4096, 8192, 16384, 32768};

// q, k, v of length n (one set per n, made once and shared by every benchmark).
struct Inputs {
  std::size_t n;
  Tensor3 q, k, v;
  double scale() const { return 1 / std::sqrt(static_cast<double>(kHeadDim)); }
  Tolerance tolerance() const { return attention_output_tolerance(q, k, v, scale()); }
};
const Inputs& inputs(std::size_t n) {
  static std::map<std::size_t, std::unique_ptr<Inputs>> cache;
  auto& slot = cache[n];
  if (!slot) {
    Rng rng(3);
    slot = std::make_unique<Inputs>();
    slot->n = n;
    slot->q = rng.normal_tensor(kHeads, n, kHeadDim);
    slot->k = rng.normal_tensor(kHeads, n, kHeadDim);
    slot->v = rng.normal_tensor(kHeads, n, kHeadDim);
  }
  return *slot;
}

// The BigBird-like layout of the header comment.
BlockLayout bigbird_like_layout(std::size_t n) {
  const std::size_t blocks = n / kBlock;
  constexpr std::size_t random = 3;
  BlockLayout layout{.seq_q = n, .seq_k = n, .block_q = kBlock, .block_k = kBlock};
  Rng rng(7);
  layout.block_start.push_back(0);
  std::vector<std::uint32_t> row, others;
  for (std::size_t qb = 0; qb < blocks; ++qb) {
    row.clear();
    others.clear();
    const bool global = qb == 0 || qb == blocks - 1;
    for (std::size_t kb = 0; kb < blocks; ++kb) {
      const bool chosen = global || kb == 0 || kb == blocks - 1 || (kb + 1 >= qb && kb <= qb + 1);
      (chosen ? row : others).push_back(static_cast<std::uint32_t>(kb));
    }
    for (std::size_t r = 0; r < random && !global && !others.empty(); ++r) {
      const std::size_t pick = rng.next_u64() % others.size();
      row.push_back(others[pick]);
      others.erase(others.begin() + static_cast<std::ptrdiff_t>(pick));
    }
    std::sort(row.begin(), row.end());
    layout.key_blocks.insert(layout.key_blocks.end(), row.begin(), row.end());
    layout.partial.insert(layout.partial.end(), row.size(), -1);
    layout.block_start.push_back(layout.key_blocks.size());
  }
  return layout;
}

// The benchmark's layouts for n (made once per n and layout).
const BlockLayout& layout(std::size_t n, int which) {
  static std::map<std::pair<std::size_t, int>, std::unique_ptr<BlockLayout>> cache;
  auto& slot = cache[{n, which}];
  if (!slot)
    slot = std::make_unique<BlockLayout>(
        which == 0 ? to_block_layout(sliding_window_pattern(n, kRadius, kRadius), kBlock, kBlock) : bigbird_like_layout(n));
  return *slot;
}

// Rows [first, first + count) of a layout's pattern, as a pattern of `count` queries over every key.
SparsePattern rows_of_layout(const BlockLayout& layout, std::size_t first, std::size_t count) {
  SparsePattern p{.seq_q = count, .seq_k = layout.seq_k};
  p.row_start.push_back(0);
  for (std::size_t i = first; i < first + count; ++i) {
    const std::size_t qb = i / layout.block_q, r = i % layout.block_q;
    for (std::size_t b = layout.block_start[qb]; b < layout.block_start[qb + 1]; ++b) {
      const std::size_t k0 = std::size_t{layout.key_blocks[b]} * layout.block_k;
      const std::size_t cols = std::min(layout.block_k, layout.seq_k - k0);
      const std::uint8_t* mask =
          layout.partial[b] < 0
              ? nullptr
              : layout.masks.data() + static_cast<std::size_t>(layout.partial[b]) * layout.block_q * layout.block_k +
                    r * layout.block_k;
      for (std::size_t c = 0; c < cols; ++c)
        if (mask == nullptr || mask[c] != 0) p.keys.push_back(static_cast<std::uint32_t>(k0 + c));
    }
    p.row_start.push_back(p.keys.size());
  }
  return p;
}

// Attended pairs of a layout, per head.
double attended_pairs(const BlockLayout& layout) {
  double pairs = 0;
  for (std::size_t qb = 0; qb < layout.query_blocks(); ++qb) {
    const std::size_t rows = std::min(layout.block_q, layout.seq_q - qb * layout.block_q);
    for (std::size_t b = layout.block_start[qb]; b < layout.block_start[qb + 1]; ++b) {
      const std::size_t k0 = std::size_t{layout.key_blocks[b]} * layout.block_k;
      const std::size_t cols = std::min(layout.block_k, layout.seq_k - k0);
      if (layout.partial[b] < 0) {
        pairs += static_cast<double>(rows * cols);
        continue;
      }
      const std::uint8_t* mask = layout.masks.data() + static_cast<std::size_t>(layout.partial[b]) * layout.block_q * layout.block_k;
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) pairs += mask[r * layout.block_k + c];
    }
  }
  return pairs;
}

// Checks `out` on three slices of 32 rows (the first, the middle and the last: BigBird's first
// rows are global and see every key) against the reference on those rows alone: each row's output
// depends on its own query and on the keys its pattern lists, nothing else.
bool validate_sparse(benchmark::State& state, const Tensor3& out, const Inputs& in, const BlockLayout& pattern_layout) {
  constexpr std::size_t rows = 32;
  for (const std::size_t first : {std::size_t{0}, in.n / 2, in.n - rows}) {
    const SparsePattern p = rows_of_layout(pattern_layout, first, rows);
    const Tensor3 want = ref::sparse_attention(rows_of(in.q, first, rows), in.k, in.v, {p}).out;
    if (!validate(state, rows_of(out, first, rows), want, in.tolerance())) return false;
  }
  return true;
}

// ------------------------------------------------------------------ the dense baseline

// Seconds per call of chapter 04's dense flash kernel at each n: what `ch04_dense_flash` measured
// in this run, or one call timed here.
std::map<std::size_t, double>& dense_seconds() {
  static std::map<std::size_t, double> seconds;
  return seconds;
}
double dense_flash_seconds(const Inputs& in) {
  auto& seconds = dense_seconds();
  if (!seconds.count(in.n)) {
    const auto start = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(opt::flash_attention_forward(in.q, in.k, in.v, {}));
    seconds[in.n] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return seconds[in.n];
}

// Chapter 04's headline forward pass (v2's micro-kernels, tiles of 64 x 64) over every key.
void ch04_dense_flash(benchmark::State& state) {
  const Inputs& in = inputs(static_cast<std::size_t>(state.range(0)));
  auto run = [&] { return opt::flash_attention_forward(in.q, in.k, in.v, {}); };
  // Checked against the reference on 32 rows that see every key.
  const FlashOutput first = run();
  constexpr std::size_t rows = 32;
  SparsePattern all{.seq_q = rows, .seq_k = in.n};
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < in.n; ++j) all.keys.push_back(static_cast<std::uint32_t>(j));
    all.row_start.push_back(i * in.n);
  }
  all.row_start.push_back(rows * in.n);
  const Tensor3 want = ref::sparse_attention(rows_of(in.q, in.n - rows, rows), in.k, in.v, {all}).out;
  if (!validate(state, rows_of(first.out, in.n - rows, rows), want, in.tolerance())) return;
  report_extra_memory(state, run, static_cast<double>(kHeads * in.n * (kHeadDim + 1) * sizeof(float)));
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(run());
  dense_seconds()[in.n] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] = gflops(4.0 * kHeads * static_cast<double>(in.n) * static_cast<double>(in.n) * kHeadDim);
}

// ------------------------------------------------------------------ the sparse kernels

// The counters every sparse benchmark reports, from the pairs it attends (per head) and the time
// it measured.
void sparse_counters(benchmark::State& state, const Inputs& in, double pairs, double seconds) {
  const double dense_pairs = static_cast<double>(in.n) * static_cast<double>(in.n);
  state.counters["GFLOP/s"] = gflops(4.0 * kHeads * pairs * kHeadDim);
  state.counters["ideal"] = dense_pairs / pairs;
  state.counters["speedup"] = dense_flash_seconds(in) / seconds;
  state.counters["of_ideal"] = dense_flash_seconds(in) / seconds / (dense_pairs / pairs);
}

template <class Run>
void time_sparse(benchmark::State& state, const Inputs& in, double pairs, Run run) {
  report_extra_memory(state, run, static_cast<double>(kHeads * in.n * (kHeadDim + 1) * sizeof(float)));
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(run());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / static_cast<double>(state.iterations());
  sparse_counters(state, in, pairs, seconds);
}

// args: n, layout.
void block_sparse(benchmark::State& state, const Backend& backend) {
  const Inputs& in = inputs(static_cast<std::size_t>(state.range(0)));
  const BlockLayout& l = layout(in.n, static_cast<int>(state.range(1)));
  const HeadLayouts layouts{l};
  auto run = [&] { return backend.block_sparse(in.q, in.k, in.v, layouts, {}); };
  if (!validate_sparse(state, run().out, in, l)) return;
  time_sparse(state, in, attended_pairs(l), run);
}

// args: n. The window of layout 0, without a layout.
void sliding_window(benchmark::State& state, const Backend& backend) {
  const Inputs& in = inputs(static_cast<std::size_t>(state.range(0)));
  auto run = [&] { return backend.sliding_window(in.q, in.k, in.v, {kRadius, kRadius}, {}); };
  if (!validate_sparse(state, run().out, in, layout(in.n, 0))) return;
  time_sparse(state, in, attended_pairs(layout(in.n, 0)), run);
}

// ------------------------------------------------------------------ decoding with a window

// Generates n tokens with the rolling cache of a causal window of w = 512 keys: per token one
// append and one attend, 8 heads of 64. The token vectors cycle through a pool of 1024 (the
// timing does not depend on their values). Counters: the peak heap of the whole decode
// (`peak_KiB`: the cache and one row of scores) next to what a full KV cache of n positions would
// hold (`full_cache_KiB`), and the time per token.
void window_kv_cache_decode(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t window = 512, pool = 1024;
  const Inputs& in = inputs(pool);
  std::vector<Tensor2> q(pool), k(pool), v(pool);
  for (std::size_t t = 0; t < pool; ++t) {
    q[t] = xt::view(in.q, xt::all(), t, xt::all());
    k[t] = xt::view(in.k, xt::all(), t, xt::all());
    v[t] = xt::view(in.v, xt::all(), t, xt::all());
  }
  Tensor2 last;
  auto decode = [&] {
    opt::WindowKvCache cache(kHeads, kHeadDim, kHeadDim, static_cast<long long>(window));
    for (std::size_t t = 0; t < n; ++t) {
      cache.append(k[t % pool], v[t % pool]);
      last = cache.attend(q[t % pool]);
    }
  };
  // The last token against the reference's causal window attention over its last w positions.
  decode();
  Tensor3 q_last = Tensor3::from_shape({kHeads, 1, kHeadDim}), k_win = Tensor3::from_shape({kHeads, window, kHeadDim}),
          v_win = Tensor3::from_shape({kHeads, window, kHeadDim});
  for (std::size_t j = 0; j < window; ++j) {
    const std::size_t t = (n - window + j) % pool;
    xt::view(k_win, xt::all(), j, xt::all()) = k[t];
    xt::view(v_win, xt::all(), j, xt::all()) = v[t];
  }
  xt::view(q_last, xt::all(), 0, xt::all()) = q[(n - 1) % pool];
  const Tensor3 want = ref::sliding_window_attention(q_last, k_win, v_win, {static_cast<long long>(window) - 1, 0}).out;
  const Tensor2 want_row = xt::view(want, xt::all(), 0, xt::all());
  if (!validate(state, last, want_row, in.tolerance())) return;
  const double peak = peak_extra_heap_bytes(decode);
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) decode();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  state.counters["peak_KiB"] = peak / 1024.0;
  state.counters["full_cache_KiB"] = static_cast<double>(kHeads * n * 2 * kHeadDim * sizeof(float)) / 1024.0;
  state.counters["us_per_token"] = seconds / static_cast<double>(state.iterations() * n) * 1e6;
}

// ------------------------------------------------------------------ sizes

// The headline `opt` over every length and both layouts; the reference and the student's once at
// the smallest; v1 (float loops) at 1024 and 4096; the other versions and the CUDA entries (host
// tensors, copies included) at the lab's 4096.
void block_sparse_shapes(Benchmark* b, const Backend& backend) {
  b->ArgNames({"n", "layout"});
  if (backend.kind == BackendKind::reference || backend.kind == BackendKind::student) {
    b->ArgsProduct({{1024}, {0, 1}})->Iterations(1);
  } else if (backend.name == "opt") {
    b->ArgsProduct({kLengths, {0, 1}});
  } else if (backend.name == "opt_v1") {
    b->ArgsProduct({{1024, 4096}, {0, 1}});
  } else {
    b->ArgsProduct({{4096}, {0, 1}});
  }
}

void sliding_window_shapes(Benchmark* b, const Backend& backend) {
  b->ArgNames({"n"});
  if (backend.kind == BackendKind::reference || backend.kind == BackendKind::student) {
    b->Arg(1024)->Iterations(1);
  } else if (backend.name == "opt") {
    for (const std::int64_t n : kLengths) b->Arg(n);
  } else {
    b->Arg(4096);
  }
}

}  // namespace

void register_benchmarks() {
  add_openblas_sgemm({1024});
  add_benchmark("ch04_dense_flash", ch04_dense_flash, [](Benchmark* b) {
    b->ArgNames({"n"});
    for (const std::int64_t n : kLengths) b->Arg(n);
  });
  const auto& all = sparse::backends();
  add_backends(all, &Backend::block_sparse, "block_sparse", block_sparse, block_sparse_shapes);
  add_backends(all, &Backend::sliding_window, "sliding_window", sliding_window, sliding_window_shapes);
  add_benchmark("window_kv_cache_decode", window_kv_cache_decode, [](Benchmark* b) {
    b->ArgNames({"n"});
    for (const std::int64_t n : kLengths) b->Arg(n);
  });
  benchmark::AddCustomContext("heads", "8");
  benchmark::AddCustomContext("head_dim", "64");
  benchmark::AddCustomContext("window", "bidirectional, radius 256 (513 keys); decode: causal, 512 keys");
}

}  // namespace tvlab::bench
