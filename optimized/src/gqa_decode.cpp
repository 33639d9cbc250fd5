#include "tvlab/opt/gqa_decode.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"

#include "detail/decode_checks.hpp"
#include "detail/split_decode.hpp"

namespace tvlab::opt {
namespace {

constexpr const char* kFunction = "gqa_decode_attention";
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// q . k over d floats (vectorised by the compiler).
inline float dot(const float* q, const float* k, std::size_t d) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (std::size_t e = 0; e < d; ++e) sum += q[e] * k[e];
  return sum;
}

}  // namespace

// ---------------------------------------------------------------------------------------- v1

GqaDecodeOutput gqa_decode_attention_v1(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                        std::size_t length, std::optional<double> scale) {
  const ref::GqaDecodeDims dims = ref::validate_gqa_decode(kFunction, q, k_cache, v_cache, length, scale);
  const auto& [heads, kv_heads, group, capacity, n, d, d_v, scale_value] = dims;
  const auto scale_f = static_cast<float>(scale_value);
  GqaDecodeOutput result{Tensor2::from_shape({heads, d_v}), Tensor1::from_shape({heads})};

#pragma omp parallel
  {
    std::vector<float> s(n);  // this thread's row of scores
#pragma omp for schedule(static)
    for (std::ptrdiff_t task = 0; task < static_cast<std::ptrdiff_t>(heads); ++task) {
      const auto i = static_cast<std::size_t>(task);
      const std::size_t kv = i / group;  // query head i reads kv head floor(i / (h/g))
      const float* qi = q.data() + i * d;
      const float* keys = k_cache.data() + kv * capacity * d;
      const float* values = v_cache.data() + kv * capacity * d_v;
      // s_j = scale q_i . k_j over the cached positions; m = max_j s_j
      float m = kNegInf;
      for (std::size_t j = 0; j < n; ++j) {
        s[j] = scale_f * dot(qi, keys + j * d, d);
        m = std::max(m, s[j]);
      }
      // l = sum_j e^{s_j - m};  o = sum_j e^{s_j - m} v_j / l, one contiguous axpy per position
      float* o = result.out.data() + i * d_v;
      std::fill(o, o + d_v, 0.0f);
      float l = 0.0f;
      for (std::size_t j = 0; j < n; ++j) {
        const float p = std::exp(s[j] - m);
        l += p;
        const float* vj = values + j * d_v;
#pragma omp simd
        for (std::size_t e = 0; e < d_v; ++e) o[e] += p * vj[e];
      }
      const float inv_l = 1.0f / l;
#pragma omp simd
      for (std::size_t e = 0; e < d_v; ++e) o[e] *= inv_l;
      result.lse(i) = m + std::log(l);  // L = m + ln l
    }
  }
  ref::require_finite_decode_output("gqa_decode_attention", result);
  return result;
}

// ---------------------------------------------------------------------------------------- v2

std::size_t gqa_decode_splits(std::size_t length, std::size_t kv_heads, std::size_t threads) {
  constexpr std::size_t kItemsPerThread = 4, kMinSplitLength = 256;
  const std::size_t wanted_items = kItemsPerThread * std::max<std::size_t>(threads, 1);
  const std::size_t wanted = (wanted_items + kv_heads - 1) / std::max<std::size_t>(kv_heads, 1);
  const std::size_t most = std::max<std::size_t>(1, length / kMinSplitLength);
  return std::clamp<std::size_t>(wanted, 1, most);
}

GqaDecodeOutput gqa_decode_attention_v2(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                        std::size_t length, std::optional<double> scale, std::size_t splits) {
  const ref::GqaDecodeDims dims = ref::validate_gqa_decode(kFunction, q, k_cache, v_cache, length, scale);
  const std::size_t heads = dims.heads, capacity = dims.capacity, d = dims.d, d_v = dims.d_v;
  const detail::SplitDecodeShape shape = detail::split_decode_shape(kFunction, "length", dims, splits);
  // The cache [g, capacity, d]: head kv at kv capacity d, consecutive positions d floats apart.
  const detail::FloatRows keys{k_cache.data(), capacity * d, d, d, dims.length},
      values{v_cache.data(), capacity * d_v, d_v, d_v, dims.length};
  GqaDecodeOutput result{Tensor2::from_shape({heads, d_v}), Tensor1::from_shape({heads})};
  detail::split_k_decode(q.data(), shape, keys, values, result.out.data(), result.lse.data());
  ref::require_finite_decode_output("gqa_decode_attention", result);
  return result;
}

GqaDecodeOutput gqa_decode_attention(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                     std::size_t length, std::optional<double> scale) {
  // MHA (one query head per kv head) with at least 4 heads per thread: v1 and v2 read the cache
  // once each, and v1's two long runs per head (all keys, then all values) stream faster on one
  // core than v2's alternating blocks (measured at 32K positions: 1.5x on one thread). Otherwise
  // (GQA, MQA, or too few heads to share among the threads) v2.
  const std::size_t heads = q.shape()[0], kv_heads = k_cache.dimension() == 3 ? k_cache.shape()[0] : 0;
  const auto threads = static_cast<std::size_t>(omp_get_max_threads());
  if (heads == kv_heads && heads >= 4 * threads) return gqa_decode_attention_v1(q, k_cache, v_cache, length, scale);
  return gqa_decode_attention_v2(q, k_cache, v_cache, length, scale);
}

}  // namespace tvlab::opt
