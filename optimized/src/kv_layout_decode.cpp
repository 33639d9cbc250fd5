#include "tvlab/opt/kv_layout_decode.hpp"

#include <algorithm>

#include "tvlab/core/error.hpp"

#include "detail/decode_checks.hpp"
#include "detail/split_decode.hpp"

namespace tvlab::opt {
namespace {

// y[b][a][c] = x[a][b][c]: the first two axes swapped, each row of the last axis copied whole.
Tensor3 swap_first_axes(const char* function, const Tensor3& x) {
  require_nonempty(function, "the cache", x);
  const std::size_t a = x.shape()[0], b = x.shape()[1], d = x.shape()[2];
  Tensor3 y = Tensor3::from_shape({b, a, d});
  for (std::size_t i = 0; i < a; ++i)
    for (std::size_t j = 0; j < b; ++j) std::copy_n(x.data() + (i * b + j) * d, d, y.data() + (j * a + i) * d);
  return y;
}

}  // namespace

Tensor3 per_token_layout(const Tensor3& per_head) { return swap_first_axes("per_token_layout", per_head); }

Tensor3 per_head_layout(const Tensor3& per_token) { return swap_first_axes("per_head_layout", per_token); }

ref::GqaDecodeOutput gqa_decode_attention_per_token(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                                    std::size_t length, std::optional<double> scale, std::size_t splits) {
  constexpr const char* function = "gqa_decode_attention_per_token";
  require_nonempty(function, "k_cache", k_cache);
  require_nonempty(function, "v_cache", v_cache);
  // [capacity, g, d]: axis 0 the positions, axis 1 the kv heads.
  const std::size_t capacity = k_cache.shape()[0], kv_heads = k_cache.shape()[1], d = k_cache.shape()[2];
  const std::size_t d_v = v_cache.shape()[2];
  const detail::SplitDecodeShape shape = detail::validate_split_decode(
      function, q, "k_cache", {kv_heads, capacity, d}, "v_cache", {v_cache.shape()[1], v_cache.shape()[0], d_v}, length,
      scale, splits);
  // Head kv starts kv d floats into the cache; consecutive positions are g d floats apart.
  const detail::FloatRows keys{k_cache.data(), d, kv_heads * d, d, shape.length},
      values{v_cache.data(), d_v, kv_heads * d_v, d_v, shape.length};
  ref::GqaDecodeOutput result{Tensor2::from_shape({shape.heads, d_v}), Tensor1::from_shape({shape.heads})};
  detail::split_k_decode(q.data(), shape, keys, values, result.out.data(), result.lse.data());
  return result;
}

}  // namespace tvlab::opt
