#include "tvlab/opt/bf16_kv_decode.hpp"

#include <cstdint>

#include "tvlab/core/error.hpp"

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

}  // namespace

ref::GqaDecodeOutput bf16_kv_decode_attention_split_k(const Tensor2& q, const Bf16Kv& k_cache, const Bf16Kv& v_cache,
                                                      std::size_t length, std::optional<double> scale,
                                                      std::size_t splits) {
  constexpr const char* function = "bf16_kv_decode_attention";
  validate_bf16_kv(function, "k_cache", k_cache);
  validate_bf16_kv(function, "v_cache", v_cache);
  const detail::SplitDecodeShape shape = detail::validate_split_decode(
      function, q, "k_cache", {k_cache.heads, k_cache.capacity, k_cache.head_dim}, "v_cache",
      {v_cache.heads, v_cache.capacity, v_cache.head_dim}, length, scale, splits, detail::kConvertedPiece);
  ref::GqaDecodeOutput result{Tensor2::from_shape({shape.heads, shape.d_v}), Tensor1::from_shape({shape.heads})};
  detail::split_k_decode(q.data(), shape, Bf16Rows{k_cache}, Bf16Rows{v_cache}, result.out.data(), result.lse.data());
  return result;
}

ref::GqaDecodeOutput bf16_kv_decode_attention(const Tensor2& q, const Bf16Kv& k_cache, const Bf16Kv& v_cache,
                                              std::size_t length, std::optional<double> scale) {
  return bf16_kv_decode_attention_split_k(q, k_cache, v_cache, length, scale, 0);
}

}  // namespace tvlab::opt
