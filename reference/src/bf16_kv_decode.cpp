#include "tvlab/ref/bf16_kv_decode.hpp"

namespace tvlab::ref {

GqaDecodeOutput bf16_kv_decode_attention(const Tensor2& q, const Bf16Kv& k_cache, const Bf16Kv& v_cache,
                                         std::size_t length, std::optional<double> scale) {
  constexpr const char* function = "bf16_kv_decode_attention";
  validate_bf16_kv(function, "k_cache", k_cache);
  validate_bf16_kv(function, "v_cache", v_cache);
  validate_decode_step(function, q, "k_cache", {k_cache.heads, k_cache.capacity, k_cache.head_dim}, "v_cache",
                       {v_cache.heads, v_cache.capacity, v_cache.head_dim}, length, scale);  // named as this step
  // bf16 -> float is exact: the double decode over these floats is the decode over the bf16 values.
  return gqa_decode_attention(q, from_bf16_kv(k_cache), from_bf16_kv(v_cache), length, scale);
}

}  // namespace tvlab::ref
