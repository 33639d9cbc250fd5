#include "tvlab/ref/gqa_decode.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"

namespace tvlab::ref {

GqaDecodeDims validate_decode_step(const char* function, const Tensor2& q, const char* k_name, DecodeCacheExtent k,
                                   const char* v_name, DecodeCacheExtent v, std::size_t length,
                                   std::optional<double> scale) {
  require_nonempty(function, "q", q);
  const std::size_t heads = q.shape()[0], d = q.shape()[1];
  require(k.dim == d, function, k_name, " has head_dim ", k.dim, ", expected ", d, " (the keys' dimension is the queries')");
  require(v.heads == k.heads, function, v_name, " has kv heads ", v.heads, ", expected ", k.heads,
          " (one value head per key head)");
  require(v.capacity == k.capacity, function, v_name, " has capacity ", v.capacity, ", expected ", k.capacity,
          " (the value cache holds the key cache's positions)");
  require(heads % k.heads == 0, function, "num_heads (", heads, ", the rows of q) must be a multiple of num_kv_heads (",
          k.heads, ", the first axis of ", k_name, "): each kv head serves h/g query heads");
  require(length >= 1 && length <= k.capacity, function, "length (", length, ") must be in [1, capacity = ", k.capacity,
          "]: the step attends to at least the token itself and to no position the cache has no room for");
  const double scale_value = scale.value_or(1.0 / std::sqrt(static_cast<double>(d)));
  require(std::isfinite(scale_value) && scale_value > 0.0 && scale_value <= std::numeric_limits<float>::max(), function,
          "scale (", scale_value, ") must be positive and representable in float");
  require_finite_max_abs(function, "q", q);
  return {heads, k.heads, heads / k.heads, k.capacity, length, d, v.dim, scale_value};
}

GqaDecodeDims validate_gqa_decode(const char* function, const Tensor2& q, const Tensor3& k_cache,
                                  const Tensor3& v_cache, std::size_t length, std::optional<double> scale) {
  require_nonempty(function, "q", q);
  require_nonempty(function, "k_cache", k_cache);
  require_nonempty(function, "v_cache", v_cache);
  return validate_decode_step(function, q, "k_cache", {k_cache.shape()[0], k_cache.shape()[1], k_cache.shape()[2]},
                              "v_cache", {v_cache.shape()[0], v_cache.shape()[1], v_cache.shape()[2]}, length, scale);
}

void require_finite_decode_output(const char* function, const GqaDecodeOutput& result) {
  const bool finite = std::isfinite(max_abs_or_inf(result.out.data(), result.out.size())) &&
                      std::isfinite(max_abs_or_inf(result.lse.data(), result.lse.size()));
  require(finite, function,
          "k_cache or v_cache holds an infinite or NaN value among the cached positions: the output is not finite "
          "(the step does not scan the cache beforehand; it checks its result)");
}

GqaDecodeOutput gqa_decode_attention(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                     std::size_t length, std::optional<double> scale) {
  const GqaDecodeDims dims = validate_gqa_decode("gqa_decode_attention", q, k_cache, v_cache, length, scale);
  const auto& [heads, kv_heads, group, capacity, n, d, d_v, scale_value] = dims;
  GqaDecodeOutput result{Tensor2::from_shape({heads, d_v}), Tensor1::from_shape({heads})};
  std::vector<double> s(n), o(d_v);
  for (std::size_t i = 0; i < heads; ++i) {
    const std::size_t kv = i / group;  // query head i reads kv head floor(i / (h/g))
    // s_j = scale q_i . k_j over the cached positions j < length; m = max_j s_j
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < n; ++j) {
      double dot = 0.0;
      for (std::size_t e = 0; e < d; ++e) dot += static_cast<double>(q(i, e)) * k_cache(kv, j, e);
      s[j] = scale_value * dot;
      m = std::max(m, s[j]);
    }
    // l = sum_j e^{s_j - m};  o = sum_j e^{s_j - m} v_j / l;  L = m + ln l
    double l = 0.0;
    std::fill(o.begin(), o.end(), 0.0);
    for (std::size_t j = 0; j < n; ++j) {
      const double p = std::exp(s[j] - m);
      l += p;
      for (std::size_t e = 0; e < d_v; ++e) o[e] += p * v_cache(kv, j, e);
    }
    for (std::size_t e = 0; e < d_v; ++e) result.out(i, e) = static_cast<float>(o[e] / l);
    result.lse(i) = static_cast<float>(m + std::log(l));
  }
  require_finite_decode_output("gqa_decode_attention", result);
  return result;
}

}  // namespace tvlab::ref
