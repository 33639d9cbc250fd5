#include "tvlab/core/attention_mask.hpp"

#include <algorithm>
#include <cmath>

#include "tvlab/core/error.hpp"

namespace tvlab {
namespace {

// [lo, hi) clipped to [0, limit), as an IndexRange (begin == end when empty).
IndexRange clipped(long long lo, long long hi, std::size_t limit) {
  const auto n = static_cast<long long>(limit);
  const long long begin = std::clamp(lo, 0LL, n);
  const long long end = std::clamp(hi, begin, n);
  return {static_cast<std::size_t>(begin), static_cast<std::size_t>(end)};
}

// p - w without overflow, floored at `floor` (widths may be as large as LLONG_MAX).
long long minus_width(long long p, long long w, long long floor) { return w >= p - floor ? floor : p - w; }

// p + w + 1 without overflow, capped at `cap`.
long long plus_width_past(long long p, long long w, long long cap) { return w >= cap - p - 1 ? cap : p + w + 1; }

}  // namespace

long long AttentionMask::query_position(std::size_t i, std::size_t seq_q, std::size_t seq_k) const {
  const auto row = static_cast<long long>(i);
  return causal_align == CausalAlign::top_left ? row : row + static_cast<long long>(seq_k) - static_cast<long long>(seq_q);
}

bool AttentionMask::allows(std::size_t i, std::size_t j, std::size_t seq_q, std::size_t seq_k) const {
  const long long p = query_position(i, seq_q, seq_k), key = static_cast<long long>(j);
  if (causal && key > p) return false;                                           // j <= i'
  if (window && (p - key > window->left || key - p > window->right)) return false;  // i' - w_l <= j <= i' + w_r
  if (allowed && !(*allowed)(i, j)) return false;
  return true;
}

double AttentionMask::score_bias(std::size_t h, std::size_t i, std::size_t j, std::size_t seq_q,
                                 std::size_t seq_k) const {
  // b_ij - m_h |i' - j|
  double b = bias ? static_cast<double>((*bias)(i, j)) : 0.0;
  if (alibi_slopes) {
    const long long distance = query_position(i, seq_q, seq_k) - static_cast<long long>(j);
    b -= (*alibi_slopes)(h) * std::fabs(static_cast<double>(distance));
  }
  return b;
}

IndexRange AttentionMask::key_range(std::size_t i, std::size_t seq_q, std::size_t seq_k) const {
  const long long p = query_position(i, seq_q, seq_k), n_k = static_cast<long long>(seq_k);
  long long lo = 0, hi = n_k;  // [max(0, i' - w_l), min(n_k, i' + w_r + 1)), hi <= i' + 1 when causal
  if (window) {
    lo = minus_width(p, window->left, 0);
    hi = plus_width_past(p, window->right, n_k);
  }
  if (causal) hi = std::min(hi, p + 1);
  return clipped(lo, hi, seq_k);
}

IndexRange AttentionMask::key_range_of_rows(std::size_t first, std::size_t last, std::size_t seq_q,
                                            std::size_t seq_k) const {
  if (last <= first) return {};
  const IndexRange a = key_range(first, seq_q, seq_k), b = key_range(last - 1, seq_q, seq_k);
  // An empty first row (possible only at the end of the keys) contributes nothing.
  return a.empty() ? b : IndexRange{a.begin, std::max(a.end, b.end)};
}

IndexRange AttentionMask::query_range(std::size_t j, std::size_t seq_q, std::size_t seq_k) const {
  // Key j is in key_range(i) when i' - w_l <= j <= i' + w_r (and j <= i' when causal), that is
  // j - w_r <= i' <= j + w_l with w_r replaced by min(w_r, 0) = 0 under causal; i = i' - offset.
  const long long offset = causal_align == CausalAlign::top_left
                               ? 0
                               : static_cast<long long>(seq_k) - static_cast<long long>(seq_q);
  const long long key = static_cast<long long>(j), n_q = static_cast<long long>(seq_q);
  // Bounds of i' = i + offset: [key - w_r, key + w_l], the lower one at least key with causal.
  long long lo = offset, hi = n_q + offset;  // i' over all rows: [offset, n_q + offset)
  if (window) {
    lo = std::max(lo, minus_width(key, window->right, offset));
    hi = std::min(hi, plus_width_past(key, window->left, n_q + offset));
  }
  if (causal) lo = std::max(lo, key);
  return clipped(lo - offset, hi - offset, seq_q);
}

IndexRange AttentionMask::query_range_of_keys(std::size_t first, std::size_t last, std::size_t seq_q,
                                              std::size_t seq_k) const {
  if (last <= first) return {};
  const IndexRange a = query_range(first, seq_q, seq_k), b = query_range(last - 1, seq_q, seq_k);
  // Keys no query sees (possible only at the end of the keys) contribute nothing.
  return a.empty() ? b : IndexRange{a.begin, std::max(a.end, b.end)};
}

void validate_attention_mask(const char* fn, std::size_t heads, std::size_t seq_q, std::size_t seq_k,
                             const AttentionMask& mask) {
  require(mask.causal_align == CausalAlign::top_left || mask.causal_align == CausalAlign::bottom_right, fn,
          "mask.causal_align has an unknown value");
  if (mask.uses_positions() && mask.causal_align == CausalAlign::bottom_right) {
    require(seq_q <= seq_k, fn, "mask.causal_align = bottom_right (with causal, window or alibi_slopes) needs seq_q (",
            seq_q, ") <= seq_k (", seq_k, "): the queries are the last seq_q of the seq_k positions; ",
            "causal_align = top_left places query i at position i");
  }
  if (mask.window) {
    require(mask.window->left >= 0, fn, "mask.window.left (", mask.window->left,
            ") must be >= 0: a query always sees the key at its own position");
    require(mask.window->right >= 0, fn, "mask.window.right (", mask.window->right,
            ") must be >= 0: a query always sees the key at its own position");
  }
  if (mask.allowed) {
    require(mask.allowed->shape()[0] == seq_q && mask.allowed->shape()[1] == seq_k, fn, "mask.allowed has shape ",
            shape_string_of(*mask.allowed), ", expected [seq_q, seq_k] = [", seq_q, ", ", seq_k, "]");
  }
  if (mask.bias) {
    const auto& b = *mask.bias;
    require(b.shape()[0] == seq_q && b.shape()[1] == seq_k, fn, "mask.bias has shape ", shape_string_of(b),
            ", expected [seq_q, seq_k] = [", seq_q, ", ", seq_k, "]");
    for (float x : b) {
      require(!std::isnan(x) && x != INFINITY, fn, "mask.bias contains ", x,
              "; only finite values and -inf (forbidden) are allowed");
    }
  }
  if (mask.alibi_slopes) {
    require_dim(fn, "mask.alibi_slopes", *mask.alibi_slopes, 0, "length", heads, "the number of heads");
    for (double m : *mask.alibi_slopes)
      require(std::isfinite(m) && m >= 0.0, fn, "mask.alibi_slopes contains ", m, "; slopes must be finite and >= 0");
  }
}

std::string to_string(const MaskSupport& s) {
  std::string out;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!out.empty()) out += ", ";
    out += name;
  };
  add(s.causal, "causal");
  add(s.top_left, "causal_align = top_left");
  add(s.window, "window");
  add(s.allowed, "allowed");
  add(s.bias, "bias");
  add(s.alibi, "alibi_slopes");
  return out.empty() ? "no mask" : out;
}

void require_supported(const char* fn, const AttentionMask& mask, const MaskSupport& supported) {
  auto refuse = [&](const char* part) {
    fail(fn, "mask.", part, " is not supported by this backend (it supports: ", to_string(supported),
         (supported.top_left ? "" : ", bottom_right alignment only"), ")");
  };
  if (mask.causal && !supported.causal) refuse("causal");
  if (mask.window && !supported.window) refuse("window");
  if (mask.uses_positions() && mask.causal_align == CausalAlign::top_left && !supported.top_left)
    refuse("causal_align = top_left");
  if (mask.allowed && !supported.allowed) refuse("allowed");
  if (mask.bias && !supported.bias) refuse("bias");
  if (mask.alibi_slopes && !supported.alibi) refuse("alibi_slopes");
}

}  // namespace tvlab
