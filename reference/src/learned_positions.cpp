#include "tvlab/ref/learned_positions.hpp"

#include <algorithm>

#include "tvlab/core/error.hpp"

namespace tvlab::ref {

Tensor2 learned_position_embedding(const Tensor2& table, long long first_position, long long count) {
  const char* fn = "learned_position_embedding";
  require_nonempty(fn, "table", table);
  require(first_position >= 0, fn, "first_position (", first_position, ") must be >= 0");
  require_positive(fn, "count", count);
  const auto rows = static_cast<long long>(table.shape()[0]);
  // count <= rows - first_position, written so that first_position + count cannot overflow.
  require(count <= rows - first_position, fn, "position ", std::max(first_position, rows),
          " has no row: the learned table has max_positions = ", rows,
          " rows (positions 0 .. ", rows - 1, "), and a lookup table cannot extrapolate");
  Tensor2 out = Tensor2::from_shape({static_cast<std::size_t>(count), table.shape()[1]});
  // E[t] = table[first_position + t]: a copy, nothing computed.
  for (long long t = 0; t < count; ++t)
    for (std::size_t c = 0; c < table.shape()[1]; ++c)
      out(static_cast<std::size_t>(t), c) = table(static_cast<std::size_t>(first_position + t), c);
  return out;
}

}  // namespace tvlab::ref
