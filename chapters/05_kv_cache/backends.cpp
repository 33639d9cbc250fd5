#include "backends.hpp"

#include <cmath>
#include <limits>
#include <string>

#include "tvlab/core/error.hpp"
#include "tvlab/core/kv_heads.hpp"
#include "tvlab/ref/gqa_attention.hpp"

namespace tvlab::kv {

DecodeAttention reference_decode_attention(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                           std::size_t length, std::optional<double> scale) {
  constexpr const char* kFunction = "gqa_decode_attention";
  // The shapes: q [h, d], k_cache [g, capacity, d], v_cache [g, capacity, d_v], g dividing h.
  const std::size_t h = q.shape()[0], d = q.shape()[1];
  const std::size_t g = k_cache.shape()[0], capacity = k_cache.shape()[1];
  require(h > 0 && d > 0, kFunction, "q [", h, ", ", d, "] must have at least one head and one dimension");
  require(g > 0 && capacity > 0 && k_cache.shape()[2] == d, kFunction, "k_cache [", g, ", ", capacity, ", ",
          k_cache.shape()[2], "] must be [num_kv_heads, capacity, ", d, "] (q's head dim)");
  require(v_cache.shape()[0] == g && v_cache.shape()[1] == capacity && v_cache.shape()[2] > 0, kFunction, "v_cache [",
          v_cache.shape()[0], ", ", v_cache.shape()[1], ", ", v_cache.shape()[2], "] must be [", g, ", ", capacity,
          ", d_v] (k_cache's kv heads and capacity)");
  validate_kv_heads(kFunction, KvHeads{static_cast<int>(h), static_cast<int>(g)});
  require(length >= 1 && length <= capacity, kFunction, "length (", length, ") must be 1 to the capacity (", capacity,
          ")");
  require(!scale || (std::isfinite(*scale) && *scale > 0), kFunction, "scale (", scale.value_or(0.0),
          ") must be positive and finite");
  require_finite(kFunction, "q", q);
  // Only the cached positions [0, length) are data; the free slots after them may hold anything.
  const Tensor3 keys = xt::view(k_cache, xt::all(), xt::range(0, length), xt::all());
  const Tensor3 values = xt::view(v_cache, xt::all(), xt::range(0, length), xt::all());
  require_finite(kFunction, "k_cache", keys);
  require_finite(kFunction, "v_cache", values);

  // The output: one query row per head over the cached rows (no mask: the new token is the last
  // position, so every cached position is in its past).
  AttentionConfig cfg;
  cfg.scale = scale;
  const Tensor3 queries = xt::view(q, xt::all(), xt::newaxis(), xt::all());  // [h, 1, d]
  const Tensor3 out = ref::grouped_scaled_dot_product_attention(queries, keys, values, cfg);

  // lse_t = m_t + log sum_p exp(s_tp - m_t), s_tp = scale q_t . k_{kappa(t), p}, in double.
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(d)));
  const KvHeads heads{static_cast<int>(h), static_cast<int>(g)};
  DecodeAttention result{Tensor2(xt::view(out, xt::all(), 0, xt::all())), Tensor1::from_shape({h})};
  std::vector<double> scores(length);
  for (std::size_t t = 0; t < h; ++t) {
    const std::size_t j = heads.kv_head_of(t);
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t p = 0; p < length; ++p) {
      double dot = 0.0;
      for (std::size_t e = 0; e < d; ++e) dot += static_cast<double>(q(t, e)) * keys(j, p, e);
      scores[p] = s * dot;
      m = std::max(m, scores[p]);
    }
    double sum = 0.0;
    for (std::size_t p = 0; p < length; ++p) sum += std::exp(scores[p] - m);
    result.lse(t) = static_cast<float>(m + std::log(sum));
  }
  return result;
}

// Every implementation, in the order the lesson reads them: the reference, each optimized
// version, the CUDA kernels.
const std::vector<Backend>& backends() {
  static const std::vector<Backend> all = {
      {.name = "ref", .kind = BackendKind::reference, .decode = reference_decode_attention},
      // Next, from tvlab/opt/gqa_decode.hpp and tvlab/cuda/gqa_decode.hpp (the same arguments):
      //   {.name = "opt", .kind = BackendKind::optimized, .decode = opt::gqa_decode_attention},
      //   {.name = "cuda", .kind = BackendKind::cuda, .caps = {.needs_device = true},
      //    .decode = cuda::gqa_decode_attention},
      // and ref::gqa_decode_attention (tvlab/ref/gqa_decode.hpp) in place of reference_decode_attention.
  };
  return all;
}

}  // namespace tvlab::kv
