#include "tvlab/opt/bf16_kv_decode.hpp"

#include <cstdint>

#include "tvlab/core/error.hpp"

#include "detail/code_kernels.hpp"
#include "detail/converted_rows.hpp"
#include "detail/decode_checks.hpp"
#include "detail/kv_dequant_rows.hpp"
#include "detail/split_decode.hpp"

namespace tvlab::opt {
namespace {

// Rows of a bf16 cache widened to float (detail::widen_bf16_row): a bf16 value's bits are the top
// 16 bits of the float it stands for, so x = bits << 16, exactly.
struct Bf16Rows {
  const Bf16Kv& cache;

  bool needs_buffer(std::size_t) const { return true; }
  detail::RowBlock rows(std::size_t kv, std::size_t first, std::size_t count, std::size_t width, float* buffer) const {
    const std::size_t d = cache.head_dim;
    const std::uint16_t* bits = cache.bits.data() + (kv * cache.capacity + first) * d;
    for (std::size_t c = 0; c < count; ++c) detail::widen_bf16_row(bits + c * d, d, buffer + c * width);
    return {buffer, width};
  }
};

// A bf16 cache read in place (a detail::CodeSource): a request's rows are `count` consecutive rows
// of 16-bit values, which the kernels of detail/code_kernels.hpp widen to floats in registers
// (detail::Bf16Codes, one shift each; no scale) with no buffer; the rows kPrefetchDistance
// positions ahead are prefetched when they are attended. For heads of whole registers; otherwise
// Bf16Rows.
struct Bf16InPlace {
  using Codes = detail::Bf16Codes;
  const Bf16Kv& cache;
  std::size_t length;  // positions the step attends to: no row past them is prefetched

  bool needs_buffer(std::size_t) const { return false; }
  detail::CodeBlock code_rows(std::size_t kv, std::size_t first, std::size_t count) const {
    const std::size_t row_bytes = cache.head_dim * sizeof(std::uint16_t);
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(cache.bits.data() + (kv * cache.capacity + first) * cache.head_dim);
    const bool ahead = first + detail::kPrefetchDistance + count <= length;
    return {bytes, row_bytes, nullptr, ahead ? bytes + detail::kPrefetchDistance * row_bytes : nullptr};
  }
};

}  // namespace

ref::GqaDecodeOutput bf16_kv_decode_attention_split_k(const Tensor2& q, const Bf16Kv& k_cache, const Bf16Kv& v_cache,
                                                      std::size_t length, std::optional<double> scale,
                                                      std::size_t splits) {
  constexpr const char* function = "bf16_kv_decode_attention";
  validate_bf16_kv(function, "k_cache", k_cache);
  validate_bf16_kv(function, "v_cache", v_cache);
  // Heads of whole registers are read in place, in whole blocks; others through the buffer, a
  // piece at a time.
  const bool in_place = k_cache.head_dim % detail::kLanes == 0 && v_cache.head_dim % detail::kLanes == 0;
  const detail::SplitDecodeShape shape = detail::validate_split_decode(
      function, q, "k_cache", {k_cache.heads, k_cache.capacity, k_cache.head_dim}, "v_cache",
      {v_cache.heads, v_cache.capacity, v_cache.head_dim}, length, scale, splits, in_place ? 0 : detail::kConvertedPiece);
  ref::GqaDecodeOutput result{Tensor2::from_shape({shape.heads, shape.d_v}), Tensor1::from_shape({shape.heads})};
  if (in_place)
    detail::split_k_decode(q.data(), shape, Bf16InPlace{k_cache, shape.length}, Bf16InPlace{v_cache, shape.length},
                           result.out.data(), result.lse.data());
  else
    detail::split_k_decode(q.data(), shape, Bf16Rows{k_cache}, Bf16Rows{v_cache}, result.out.data(), result.lse.data());
  return result;
}

ref::GqaDecodeOutput bf16_kv_decode_attention(const Tensor2& q, const Bf16Kv& k_cache, const Bf16Kv& v_cache,
                                              std::size_t length, std::optional<double> scale) {
  return bf16_kv_decode_attention_split_k(q, k_cache, v_cache, length, scale, 0);
}

}  // namespace tvlab::opt
