#pragma once
/// @file
/// Chapter 05, a KV cache stored in bf16: keys or values `[heads, capacity, head_dim]` kept as the
/// 16 bits of their bf16 values (`tvlab/core/dtype.hpp`), half the bytes of float. bf16 keeps
/// float's 8 exponent bits and 7 of its 23 mantissa bits, so reading an element back is exact and
/// costs one shift: the float whose bits are the bf16 bits followed by 16 zeros. Storing rounds
/// to nearest even, a relative error of at most \f$ 2^{-8} \f$.
/// @ingroup ch05

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tvlab/core/tensor.hpp"

namespace tvlab {

/// @ingroup ch05
/// A bf16 cache `[heads, capacity, head_dim]`.
struct Bf16Kv {
  std::size_t heads = 0, capacity = 0, head_dim = 0;
  std::vector<std::uint16_t> bits;  ///< row-major over (head, position, channel)

  /// Element (h, t, c) as a float (exact).
  float value(std::size_t h, std::size_t t, std::size_t c) const;
};

/// @ingroup ch05
/// `x` `[heads, capacity, head_dim]` (finite, non-empty) rounded to bf16. `tvlab::Error` naming `x`
/// otherwise.
Bf16Kv to_bf16_kv(const Tensor3& x);

/// @ingroup ch05
/// The floats a bf16 cache holds, `[heads, capacity, head_dim]` (exact). Checks the cache as
/// `validate_bf16_kv`.
Tensor3 from_bf16_kv(const Bf16Kv& x);

/// Checks, for `function`, that the cache named `name` is non-empty and holds heads x capacity x
/// head_dim bits. Throws `tvlab::Error` naming `name` otherwise.
void validate_bf16_kv(const char* function, const char* name, const Bf16Kv& x);

}  // namespace tvlab
