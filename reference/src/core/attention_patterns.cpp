#include "tvlab/core/attention_patterns.hpp"

#include <algorithm>
#include <limits>

#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab {
namespace {

// Builds a pattern row by row: `keys_of(i, out)` appends row i's keys in increasing order.
template <class KeysOfRow>
SparsePattern build_pattern(const char* function, std::size_t n, KeysOfRow keys_of) {
  require(n <= std::numeric_limits<std::uint32_t>::max(), function, "n (", n, ") must be below 2^32");
  SparsePattern p{.seq_q = n, .seq_k = n};
  p.row_start.reserve(n + 1);
  p.row_start.push_back(0);
  for (std::size_t i = 0; i < n; ++i) {
    keys_of(i, p.keys);
    p.row_start.push_back(p.keys.size());
  }
  return p;
}

void push(std::vector<std::uint32_t>& keys, std::size_t j) { keys.push_back(static_cast<std::uint32_t>(j)); }

// A window width as an unsigned count, after checking that it is not negative.
std::size_t width(const char* function, const char* name, long long w) {
  require(w >= 0, function, name, " (", w, ") must be >= 0");
  return static_cast<std::size_t>(w);
}

}  // namespace

SparsePattern full_pattern(std::size_t n, bool causal) {
  return build_pattern("full_pattern", n, [&](std::size_t i, std::vector<std::uint32_t>& keys) {
    const std::size_t end = causal ? i + 1 : n;
    for (std::size_t j = 0; j < end; ++j) push(keys, j);
  });
}

SparsePattern sliding_window_pattern(std::size_t n, long long left, long long right) {
  const char* fn = "sliding_window_pattern";
  const std::size_t w_l = width(fn, "left", left), w_r = width(fn, "right", right);
  return build_pattern(fn, n, [&](std::size_t i, std::vector<std::uint32_t>& keys) {
    // S_i = [i - w_l, i + w_r] within [0, n)
    const std::size_t first = i >= w_l ? i - w_l : 0;
    const std::size_t last = w_r >= n - 1 - i ? n - 1 : i + w_r;
    for (std::size_t j = first; j <= last; ++j) push(keys, j);
  });
}

SparsePattern dilated_window_pattern(std::size_t n, long long radius, std::size_t dilation, bool causal) {
  const char* fn = "dilated_window_pattern";
  const std::size_t w = width(fn, "radius", radius);
  require_positive(fn, "dilation", dilation);
  return build_pattern(fn, n, [&](std::size_t i, std::vector<std::uint32_t>& keys) {
    // S_i = { i + m d : -w <= m <= w (m <= 0 with causal) } within [0, n)
    for (std::size_t m = std::min(w, i / dilation); m > 0; --m) push(keys, i - m * dilation);
    push(keys, i);
    if (causal) return;
    // i + m d < n  <=>  m <= (n - 1 - i) / d
    const std::size_t m_max = std::min(w, (n - 1 - i) / dilation);
    for (std::size_t m = 1; m <= m_max; ++m) push(keys, i + m * dilation);
  });
}

SparsePattern strided_pattern(std::size_t n, std::size_t stride, int head) {
  const char* fn = "strided_pattern";
  require_positive(fn, "stride", stride);
  require(head >= 0 && head <= 2, fn, "head (", head,
          ") must be 0 (the last l positions), 1 (every l-th position) or 2 (their union)");
  return build_pattern(fn, n, [&](std::size_t i, std::vector<std::uint32_t>& keys) {
    // A1 = { j : 0 <= i - j < l } = [local_first, i]
    const std::size_t local_first = i + 1 >= stride ? i + 1 - stride : 0;
    // A2 = { j <= i : (i - j) mod l = 0 } = { i mod l, i mod l + l, ..., i }; in the union only
    // the ones before the local window (the rest are in A1).
    if (head != 0)
      for (std::size_t j = i % stride;; j += stride) {
        if (head == 2 && j >= local_first) break;
        push(keys, j);
        if (i - j < stride) break;  // j + l would pass i (tested before adding: no overflow)
      }
    if (head != 1)
      for (std::size_t j = local_first; j <= i; ++j) push(keys, j);
  });
}

SparsePattern fixed_pattern(std::size_t n, std::size_t block, std::size_t summary, int head) {
  const char* fn = "fixed_pattern";
  require_positive(fn, "block", block);
  require_positive(fn, "summary", summary);
  require(summary <= block, fn, "summary (", summary, ") must be at most block (", block, ")");
  require(head >= 0 && head <= 2, fn, "head (", head,
          ") must be 0 (the query's block), 1 (the summary columns) or 2 (their union)");
  const std::size_t offset = block - summary;  // the summary columns of block b: b l + (l - c) .. b l + l - 1
  return build_pattern(fn, n, [&](std::size_t i, std::vector<std::uint32_t>& keys) {
    // A1 = { j <= i : floor(j / l) = floor(i / l) } = [own_first, i]
    const std::size_t own = i / block, own_first = own * block;
    // A2 = { j <= i : j mod l in {l - c, ..., l - 1} }: the last c columns of every earlier block,
    // and those of the own block up to i (in the union they are part of A1).
    if (head != 0) {
      for (std::size_t b = 0; b < own; ++b)
        for (std::size_t j = b * block + offset; j < (b + 1) * block; ++j) push(keys, j);
      if (head == 1 && i - own_first >= offset)
        for (std::size_t j = own_first + offset; j <= i; ++j) push(keys, j);
    }
    if (head != 1)
      for (std::size_t j = own_first; j <= i; ++j) push(keys, j);
  });
}

SparsePattern longformer_pattern(std::size_t n, long long radius, const std::vector<std::size_t>& globals,
                                 bool causal) {
  const char* fn = "longformer_pattern";
  const std::size_t w = width(fn, "radius", radius);
  std::vector<bool> is_global(n, false);
  for (std::size_t g : globals) {
    require(g < n, fn, "globals names position ", g, ", outside the sequence of n = ", n, " positions");
    is_global[g] = true;
  }
  std::vector<std::size_t> sorted_globals;
  for (std::size_t g = 0; g < n; ++g)
    if (is_global[g]) sorted_globals.push_back(g);
  return build_pattern(fn, n, [&](std::size_t i, std::vector<std::uint32_t>& keys) {
    const std::size_t end = causal ? i + 1 : n;  // keys [0, end)
    // A global query sees every key.
    if (is_global[i]) {
      for (std::size_t j = 0; j < end; ++j) push(keys, j);
      return;
    }
    // Others: the window [i - w, i + w] and every global key, merged in increasing order.
    const std::size_t first = i >= w ? i - w : 0, last = w >= end - 1 - i ? end - 1 : i + w;
    auto g = sorted_globals.begin();
    for (; g != sorted_globals.end() && *g < first; ++g) push(keys, *g);
    for (std::size_t j = first; j <= last; ++j) push(keys, j);
    for (g = std::upper_bound(g, sorted_globals.end(), last); g != sorted_globals.end() && *g < end; ++g)
      push(keys, *g);
  });
}

SparsePattern bigbird_pattern(std::size_t n, std::size_t block, std::size_t global_blocks, std::size_t random_blocks,
                              std::uint64_t seed) {
  const char* fn = "bigbird_pattern";
  const std::size_t b = block, g = global_blocks, r = random_blocks;
  require_positive(fn, "block", b);
  require(n % b == 0, fn, "n (", n, ") must be a multiple of block (", b,
          "): BigBird attends in whole blocks (pad the sequence)");
  const std::size_t blocks = n / b;
  require(g <= blocks, fn, "global_blocks (", g, ") must be at most the ", blocks, " blocks of n = ", n);
  require(r == 0 || blocks >= g + 3 + r, fn, "random_blocks (", r, ") needs at least global_blocks + 3 + random_blocks = ",
          g + 3 + r, " blocks, n / block = ", blocks,
          ": an interior block draws its random blocks from those neither global nor in its 3-block window");
  // Global blocks: the first ceil(g/2) and the last floor(g/2).
  const std::size_t front = (g + 1) / 2, back = g / 2;
  const auto is_global = [&](std::size_t J) { return J < front || J >= blocks - back; };

  // The key blocks of every query block, drawn in increasing order of the query block.
  Rng rng(seed);
  std::vector<std::vector<std::size_t>> key_blocks(blocks);
  std::vector<std::size_t> candidates;
  for (std::size_t I = 0; I < blocks; ++I) {
    std::vector<std::size_t>& row = key_blocks[I];
    if (is_global(I)) {
      for (std::size_t J = 0; J < blocks; ++J) row.push_back(J);
      continue;
    }
    const std::size_t window_first = I == 0 ? 0 : I - 1, window_last = std::min(blocks - 1, I + 1);
    candidates.clear();
    for (std::size_t J = 0; J < blocks; ++J) {
      const bool in_window = J >= window_first && J <= window_last;
      if (is_global(J) || in_window) row.push_back(J);  // global columns and the 3-block window
      else candidates.push_back(J);
    }
    // r of the m candidates without replacement: a partial Fisher-Yates shuffle.
    const std::size_t m = candidates.size();
    for (std::size_t t = 0; t < r; ++t) {
      std::swap(candidates[t], candidates[t + rng.next_u64() % (m - t)]);
      row.push_back(candidates[t]);
    }
    std::sort(row.begin(), row.end());
  }
  return build_pattern(fn, n, [&](std::size_t i, std::vector<std::uint32_t>& keys) {
    for (std::size_t J : key_blocks[i / b])
      for (std::size_t j = J * b; j < (J + 1) * b; ++j) push(keys, j);
  });
}

}  // namespace tvlab
