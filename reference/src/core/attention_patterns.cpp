#include "tvlab/core/attention_patterns.hpp"

#include <algorithm>
#include <limits>

#include "tvlab/core/error.hpp"

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

}  // namespace

SparsePattern full_pattern(std::size_t n, bool causal) {
  return build_pattern("full_pattern", n, [&](std::size_t i, std::vector<std::uint32_t>& keys) {
    const std::size_t end = causal ? i + 1 : n;
    for (std::size_t j = 0; j < end; ++j) push(keys, j);
  });
}

SparsePattern sliding_window_pattern(std::size_t n, std::size_t left, std::size_t right) {
  return build_pattern("sliding_window_pattern", n, [&](std::size_t i, std::vector<std::uint32_t>& keys) {
    // S_i = [i - w_l, i + w_r] within [0, n)
    const std::size_t first = i >= left ? i - left : 0;
    const std::size_t last = std::min(n - 1, right >= n - i ? n - 1 : i + right);
    for (std::size_t j = first; j <= last; ++j) push(keys, j);
  });
}

SparsePattern dilated_window_pattern(std::size_t n, std::size_t radius, std::size_t dilation, bool causal) {
  require_positive("dilated_window_pattern", "dilation", dilation);
  return build_pattern("dilated_window_pattern", n, [&](std::size_t i, std::vector<std::uint32_t>& keys) {
    // S_i = { i + m d : -w <= m <= w (m <= 0 with causal) } within [0, n)
    for (std::size_t m = std::min(radius, i / dilation); m > 0; --m) push(keys, i - m * dilation);
    push(keys, i);
    if (causal) return;
    for (std::size_t m = 1; m <= radius && m * dilation < n - i; ++m) push(keys, i + m * dilation);
  });
}

SparsePattern strided_pattern(std::size_t n, std::size_t stride, int head) {
  require_positive("strided_pattern", "stride", stride);
  require(head >= 0 && head <= 2, "strided_pattern", "head (", head,
          ") must be 0 (the last l positions), 1 (every l-th position) or 2 (their union)");
  return build_pattern("strided_pattern", n, [&](std::size_t i, std::vector<std::uint32_t>& keys) {
    // A1 = { j : 0 <= i - j < l } = [local_first, i]
    const std::size_t local_first = i + 1 >= stride ? i + 1 - stride : 0;
    // A2 = { j <= i : (i - j) mod l = 0 } = { i mod l, i mod l + l, ..., i }
    if (head != 0)
      for (std::size_t j = i % stride; j <= i && (head == 1 || j < local_first); j += stride) push(keys, j);
    if (head != 1)
      for (std::size_t j = local_first; j <= i; ++j) push(keys, j);
  });
}

SparsePattern fixed_pattern(std::size_t n, std::size_t block, std::size_t summary, int head) {
  require_positive("fixed_pattern", "block", block);
  require_positive("fixed_pattern", "summary", summary);
  require(summary <= block, "fixed_pattern", "summary (", summary, ") must be at most block (", block, ")");
  require(head >= 0 && head <= 2, "fixed_pattern", "head (", head,
          ") must be 0 (the query's block), 1 (the summary columns) or 2 (their union)");
  return build_pattern("fixed_pattern", n, [&](std::size_t i, std::vector<std::uint32_t>& keys) {
    // A1 = { j <= i : floor(j / l) = floor(i / l) } = [block_first, i]
    const std::size_t block_first = i / block * block;
    // A2 = { j <= i : j mod l in {l - c, ..., l - 1} }: the last c columns of every block
    if (head != 0)
      for (std::size_t b = 0; b * block <= i; ++b) {
        const std::size_t first = b * block + block - summary, last = std::min(b * block + block - 1, i);
        if (head == 2 && b * block == block_first) break;  // the own block is all in A1
        for (std::size_t j = first; j <= last; ++j) push(keys, j);
      }
    if (head != 1)
      for (std::size_t j = block_first; j <= i; ++j) push(keys, j);
  });
}

SparsePattern longformer_pattern(std::size_t n, std::size_t radius, const std::vector<std::size_t>& globals,
                                 bool causal) {
  std::vector<bool> is_global(n, false);
  for (std::size_t g : globals) {
    require(g < n, "longformer_pattern", "globals names position ", g, ", beyond n - 1 = ", n == 0 ? 0 : n - 1);
    is_global[g] = true;
  }
  std::vector<std::size_t> sorted_globals;
  for (std::size_t g = 0; g < n; ++g)
    if (is_global[g]) sorted_globals.push_back(g);
  return build_pattern("longformer_pattern", n, [&](std::size_t i, std::vector<std::uint32_t>& keys) {
    const std::size_t end = causal ? i + 1 : n;  // keys [0, end)
    // A global query sees every key.
    if (is_global[i]) {
      for (std::size_t j = 0; j < end; ++j) push(keys, j);
      return;
    }
    // Others: the window [i - w, i + w] and every global key, merged in increasing order.
    const std::size_t first = i >= radius ? i - radius : 0, last = std::min(end - 1, i + radius);
    auto g = sorted_globals.begin();
    for (; g != sorted_globals.end() && *g < first; ++g) push(keys, *g);
    for (std::size_t j = first; j <= last; ++j) push(keys, j);
    for (g = std::upper_bound(g, sorted_globals.end(), last); g != sorted_globals.end() && *g < end; ++g)
      push(keys, *g);
  });
}

}  // namespace tvlab
