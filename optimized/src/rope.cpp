#include "tvlab/opt/rope.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "detail/rope_row.hpp"
#include "tvlab/core/error.hpp"

namespace tvlab::opt {

RopeCache make_rope_cache(const RopeFrequencies& freqs, long long first_position, long long count) {
  const char* fn = "make_rope_cache";
  require(first_position >= 0, fn, "first_position (", first_position, ") must be >= 0");
  require_positive(fn, "count", count);
  require_nonempty(fn, "freqs.inv_freq", freqs.inv_freq);
  require_finite(fn, "freqs.inv_freq", freqs.inv_freq);
  require(std::isfinite(freqs.attention_factor) && freqs.attention_factor > 0.0 &&
              freqs.attention_factor <= std::numeric_limits<float>::max(),
          fn, "freqs.attention_factor (", freqs.attention_factor, ") must be positive and representable in float");
  const double last_position = static_cast<double>(first_position) + static_cast<double>(count) - 1.0;
  require(std::isfinite(last_position * xt::amax(xt::abs(freqs.inv_freq))()), fn, "position ", last_position,
          " times freqs.inv_freq overflows: the angle m theta_i must be finite");
  RopeCache cache;
  cache.first_position = first_position;
  cache.positions = static_cast<std::size_t>(count);
  cache.pairs = freqs.inv_freq.size();
  cache.cos.resize(cache.positions * cache.pairs);
  cache.sin.resize(cache.positions * cache.pairs);
  for (std::size_t t = 0; t < cache.positions; ++t)
    for (std::size_t i = 0; i < cache.pairs; ++i) {
      // The angle in double: m * theta_i reaches 1e5 and more, where float would lose the phase.
      const double angle = static_cast<double>(first_position + static_cast<long long>(t)) * freqs.inv_freq(i);
      cache.cos[t * cache.pairs + i] = static_cast<float>(std::cos(angle) * freqs.attention_factor);
      cache.sin[t * cache.pairs + i] = static_cast<float>(std::sin(angle) * freqs.attention_factor);
    }
  return cache;
}

namespace {

// Rotates every row of x with the cache rows starting at `cache_row0`; shapes already checked.
// Blocks of 64 positions outside, heads inside: the block's cache rows (64 x d/2 cos and sin,
// 32 KiB at d = 128) stay in cache while every head's contiguous 64 rows stream through, instead
// of streaming the whole cache again for each head. Returns whether every input and output was
// finite (checked in the same pass, see rotate_row).
bool rotate_rows(Tensor3& x, const RopeCache& cache, RopeLayout layout, std::size_t cache_row0) {
  constexpr std::size_t kBlock = 64;
  // pairs < d / 2 (partial rotation): the coordinates past 2 * pairs are left as they are.
  const std::size_t heads = x.shape()[0], seq = x.shape()[1], d = x.shape()[2], pairs = cache.pairs;
  const auto blocks = static_cast<std::ptrdiff_t>((seq + kBlock - 1) / kBlock);
  float probe = 0.0f;
#pragma omp parallel for schedule(static) reduction(+ : probe) if (x.size() > 65536)
  for (std::ptrdiff_t b = 0; b < blocks; ++b) {
    const std::size_t first = static_cast<std::size_t>(b) * kBlock, last = std::min(seq, first + kBlock);
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t t = first; t < last; ++t) {
        float* xr = x.data() + (h * seq + t) * d;
        const std::size_t row = (cache_row0 + t) * pairs;
        probe += detail::rotate_row(xr, xr, cache.cos.data() + row, cache.sin.data() + row, pairs, layout);
      }
  }
  return probe == 0.0f;
}

}  // namespace

void apply_rope_inplace(Tensor3& x, const RopeCache& cache, RopeLayout layout, long long position_offset) {
  const char* fn = "apply_rope";
  require_nonempty(fn, "x", x);
  const std::size_t seq = x.shape()[1], d = x.shape()[2];
  require(d % 2 == 0, fn, "x has head_dim ", d, "; it must be even (RoPE rotates pairs)");
  require(cache.pairs >= 1 && cache.pairs <= d / 2, fn, "the cache has ", cache.pairs,
          " pairs; x has head_dim / 2 = ", d / 2, " (a cache may rotate fewer pairs, not more)");
  require(position_offset >= cache.first_position &&
              position_offset - cache.first_position + static_cast<long long>(seq) <=
                  static_cast<long long>(cache.positions),
          fn, "positions [", position_offset, ", ", position_offset + static_cast<long long>(seq),
          ") are not all in the cache [", cache.first_position, ", ",
          cache.first_position + static_cast<long long>(cache.positions), ")");
  // x is checked for inf/NaN (and the result for overflow) while it is rotated.
  if (!rotate_rows(x, cache, layout, static_cast<std::size_t>(position_offset - cache.first_position)))
    fail(fn, "x holds an inf or NaN, or x times the attention factor overflows float (found while rotating in ",
         "place: x now holds rotated values)");
}

Tensor3 apply_rope(const Tensor3& x, const RopeFrequencies& freqs, RopeLayout layout, long long position_offset) {
  validate_rope_input("apply_rope", x, freqs, position_offset, /*check_x_values=*/false);
  const RopeCache cache = make_rope_cache(freqs, position_offset, static_cast<long long>(x.shape()[1]));
  Tensor3 y = x;
  if (!rotate_rows(y, cache, layout, 0)) {
    require_finite("apply_rope", "x", x);  // names the index of a non-finite input
    fail("apply_rope", "x times freqs.attention_factor overflows float after the rotation");
  }
  return y;
}

}  // namespace tvlab::opt
