#include "tvlab/core/attention_mask.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tvlab/core/error.hpp"

namespace tvlab {
namespace {

// Beyond any sequence: the bound of a part that is absent ("no limit").
constexpr long long kFar = std::numeric_limits<long long>::max() / 4;

// a - w and a + w for a width w >= 0 (which may be as large as LLONG_MAX), saturated at -kFar and kFar.
long long minus_width(long long a, long long w) { return w >= a + kFar ? -kFar : a - w; }
long long plus_width(long long a, long long w) { return w >= kFar - a ? kFar : a + w; }

// [lo, hi) clipped to [0, limit), as an IndexRange (begin == end when empty).
IndexRange clipped(long long lo, long long hi, std::size_t limit) {
  const auto n = static_cast<long long>(limit);
  const long long begin = std::clamp(lo, 0LL, n);
  const long long end = std::clamp(hi, begin, n);
  return {static_cast<std::size_t>(begin), static_cast<std::size_t>(end)};
}

// The keys the structural parts leave to the query at position p, before clipping to [0, n_k):
// from p - w_l (window) to p + w_r + 1 (window), at most p + 1 (causal).
long long first_key(const AttentionMask& m, long long p) { return m.window ? minus_width(p, m.window->left) : -kFar; }
long long key_end(const AttentionMask& m, long long p) {
  const long long end = m.window ? plus_width(p, m.window->right) + 1 : kFar;
  return m.causal ? std::min(end, p + 1) : end;
}

// The positions i' of the queries that key j is left to (the same inequalities solved for i'):
// from j - w_r (window), at least j (causal), to j + w_l + 1 (window).
long long first_position(const AttentionMask& m, long long j) {
  const long long lo = m.window ? minus_width(j, m.window->right) : -kFar;
  return m.causal ? std::max(lo, j) : lo;
}
long long position_end(const AttentionMask& m, long long j) { return m.window ? plus_width(j, m.window->left) + 1 : kFar; }

// i' - i: 0 (top left) or n_k - n_q (bottom right).
long long position_offset(const AttentionMask& m, std::size_t seq_q, std::size_t seq_k) {
  return m.causal_align == CausalAlign::top_left ? 0 : static_cast<long long>(seq_k) - static_cast<long long>(seq_q);
}

}  // namespace

long long AttentionMask::query_position(std::size_t i, std::size_t seq_q, std::size_t seq_k) const {
  return static_cast<long long>(i) + position_offset(*this, seq_q, seq_k);
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
  const long long p = query_position(i, seq_q, seq_k);
  return clipped(first_key(*this, p), key_end(*this, p), seq_k);
}

IndexRange AttentionMask::key_range_of_rows(std::size_t first, std::size_t last, std::size_t seq_q,
                                            std::size_t seq_k) const {
  if (last <= first) return {};
  // Before clipping, consecutive rows' ranges overlap or touch (their ends move by one), so the
  // union is one range from the first row's start to the last row's end; clipping commutes with it.
  return clipped(first_key(*this, query_position(first, seq_q, seq_k)),
                 key_end(*this, query_position(last - 1, seq_q, seq_k)), seq_k);
}

IndexRange AttentionMask::query_range(std::size_t j, std::size_t seq_q, std::size_t seq_k) const {
  // Key j is in key_range(i) when i' - w_l <= j <= i' + w_r (and j <= i' when causal), that is
  // j - w_r <= i' <= j + w_l (and i' >= j); then i = i' - offset.
  const long long offset = position_offset(*this, seq_q, seq_k), key = static_cast<long long>(j);
  return clipped(first_position(*this, key) - offset, position_end(*this, key) - offset, seq_q);
}

IndexRange AttentionMask::query_range_of_keys(std::size_t first, std::size_t last, std::size_t seq_q,
                                              std::size_t seq_k) const {
  if (last <= first) return {};
  // As for key_range_of_rows: consecutive keys' ranges overlap or touch before clipping.
  const long long offset = position_offset(*this, seq_q, seq_k);
  return clipped(first_position(*this, static_cast<long long>(first)) - offset,
                 position_end(*this, static_cast<long long>(last) - 1) - offset, seq_q);
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
