#include "tvlab/opt/tpa.hpp"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>
#include <xsimd/xsimd.hpp>

#include "detail/append_positions.hpp"
#include "detail/blas.hpp"
#include "detail/head_projections.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/opt/rope.hpp"

namespace tvlab::opt {
namespace {

using FloatBatch = xsimd::batch<float>;

std::size_t size(int value) { return static_cast<std::size_t>(value); }

struct Factors {
  Tensor3 a;  // [R, n, h]
  Tensor3 b;  // [R, n, d_h]
};

// b_r(x_t) = W^b_r x_t (one SGEMM for all ranks), and a_r(x_t) = W^a_r x_t or the fixed a_r.
Factors factors(const Tensor2& x, const TpaFactorMap& map, int rank, int heads, int head_dim) {
  const std::size_t r = size(rank), n = x.shape()[0], h = size(heads);
  std::uint64_t macs = 0;
  Factors f;
  f.b = detail::project_to_heads(x, 0, map.w_b, r, size(head_dim), macs);
  if (map.w_a.size() != 0) {
    f.a = detail::project_to_heads(x, 0, map.w_a, r, h, macs);
  } else {
    f.a = Tensor3::from_shape({r, n, h});
    for (std::size_t k = 0; k < r; ++k)
      for (std::size_t t = 0; t < n; ++t) std::copy_n(map.a.data() + k * h, h, f.a.data() + (k * n + t) * h);
  }
  return f;
}

// tpa_assemble on checked factors: row (i, t) of X is (1/R) sum_r a_r(x_t)_i b_r(x_t).
Tensor3 assemble(const Tensor3& a, const Tensor3& b) {
  const std::size_t rank = a.shape()[0], n = a.shape()[1], h = a.shape()[2], d_h = b.shape()[2];
  Tensor3 x = xt::zeros<float>({h, n, d_h});
  const float inv_rank = 1.0f / static_cast<float>(rank);
#pragma omp parallel for schedule(static) if (h * n * d_h * rank > 65536)
  for (std::size_t i = 0; i < h; ++i)
    for (std::size_t t = 0; t < n; ++t) {
      float* row = x.data() + (i * n + t) * d_h;
      for (std::size_t r = 0; r < rank; ++r) {
        const float weight = a(r, t, i) * inv_rank;
        const float* b_row = b.data() + (r * n + t) * d_h;
        for (std::size_t e = 0; e < d_h; ++e) row[e] += weight * b_row[e];
      }
    }
  return x;
}

// The cache of factors after the append, T positions: a^K [R_K, T, h], b^K [R_K, T, d_h], likewise V.
struct FactorCache {
  const Tensor3 &a_k, &b_k, &a_v, &b_v;
};

// Softmax over the positions j of every column i of s `[length, h]`, in place: s_ji becomes
// e^{s_ji - m_i}, and the sums l_i = sum_j e^{s_ji - m_i} are returned. The exponentials run over
// the flat array with xsimd (s - m is formed first, so any lane may take any column).
std::vector<float> exponentiate_columns(float* s, std::size_t length, std::size_t h) {
  std::vector<float> m(h, -std::numeric_limits<float>::infinity()), l(h, 0.0f);
  for (std::size_t j = 0; j < length; ++j)
    for (std::size_t i = 0; i < h; ++i) m[i] = std::max(m[i], s[j * h + i]);
  for (std::size_t j = 0; j < length; ++j)
    for (std::size_t i = 0; i < h; ++i) s[j * h + i] -= m[i];
  const std::size_t total = length * h, vectorised = total - total % FloatBatch::size;
  for (std::size_t k = 0; k < vectorised; k += FloatBatch::size)
    xsimd::exp(FloatBatch::load_unaligned(s + k)).store_unaligned(s + k);
  for (std::size_t k = vectorised; k < total; ++k) s[k] = std::exp(s[k]);
  for (std::size_t j = 0; j < length; ++j)
    for (std::size_t i = 0; i < h; ++i) l[i] += s[j * h + i];
  return l;
}

// One new token's attention over the first `length` cached positions, from the factors:
// q_t `[h, d_h]` (assembled, rotated), out `[h, d_h]`. Returns false when a score or an output
// leaves float's range.
bool attend_from_factors(const float* q_t, std::size_t length, const FactorCache& cache, std::size_t h, std::size_t d_h,
                         double scale, float* out) {
  const std::size_t r_k = cache.a_k.shape()[0], r_v = cache.a_v.shape()[0], tokens = cache.a_k.shape()[1];
  std::vector<float> s(length * h, 0.0f), g(length * h);
  // S_ji = (scale / R_K) sum_s a^K_{s,j,i} G^(s)_ji, G^(s) = B^K_s Q_t^T `[length, h]`
  for (std::size_t r = 0; r < r_k; ++r) {
    detail::sgemm(length, h, d_h, 1.0f, cache.b_k.data() + r * tokens * d_h, d_h, q_t, d_h, true, 0.0f, g.data(), h);
    const float* a = cache.a_k.data() + r * tokens * h;
    for (std::size_t k = 0; k < length * h; ++k) s[k] += a[k] * g[k];
  }
  const float factor = static_cast<float>(scale / static_cast<double>(r_k));
  for (float& value : s) {
    value *= factor;
    if (!std::isfinite(value)) return false;
  }
  const std::vector<float> l = exponentiate_columns(s.data(), length, h);
  // O_t = (1/R_V) sum_s (P o A^V_s)^T B^V_s, normalised by l_i: W = P o A^V_s `[length, h]`, then
  // an SGEMM with W transposed.
  std::vector<float>& weights = g;
  for (std::size_t r = 0; r < r_v; ++r) {
    const float* a = cache.a_v.data() + r * tokens * h;
    for (std::size_t k = 0; k < length * h; ++k) weights[k] = s[k] * a[k];
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(h), static_cast<int>(d_h),
                static_cast<int>(length), 1.0f, weights.data(), static_cast<int>(h),
                cache.b_v.data() + r * tokens * d_h, static_cast<int>(d_h), r == 0 ? 0.0f : 1.0f, out,
                static_cast<int>(d_h));
  }
  for (std::size_t i = 0; i < h; ++i) {
    const float normaliser = 1.0f / (static_cast<float>(r_v) * l[i]);
    for (std::size_t e = 0; e < d_h; ++e) {
      out[i * d_h + e] *= normaliser;
      if (!std::isfinite(out[i * d_h + e])) return false;
    }
  }
  return true;
}

}  // namespace

Tensor3 tpa_assemble(const Tensor3& a, const Tensor3& b) {
  ref::validate_tpa_factors("tpa_assemble", a, b);
  return assemble(a, b);
}

Tensor2 tensor_product_attention(const Tensor2& x, const TpaWeights& w, const TpaConfig& cfg, TpaCache& cache) {
  const char* fn = "tensor_product_attention";
  ref::validate_tpa_call(fn, x, w, cfg, cache);
  const std::size_t n = x.shape()[0], h = size(cfg.num_heads), d_h = size(cfg.head_dim), past = cache.tokens();
  RopeConfig rope;
  rope.head_dim = cfg.head_dim;
  rope.rope_theta = cfg.rope_theta;
  const RopeFrequencies freqs = rope_frequencies(rope);

  Factors q = factors(x, w.q, cfg.q_rank, cfg.num_heads, cfg.head_dim);
  Factors k = factors(x, w.k, cfg.k_rank, cfg.num_heads, cfg.head_dim);
  const Factors v = factors(x, w.v, cfg.v_rank, cfg.num_heads, cfg.head_dim);
  // RoPE_t on the token factors b^Q_r(x_t), b^K_r(x_t): the ranks stand where apply_rope takes heads
  q.b = apply_rope(q.b, freqs, cfg.rope_layout, static_cast<long long>(past));
  k.b = apply_rope(k.b, freqs, cfg.rope_layout, static_cast<long long>(past));
  const Tensor3 a_k = detail::append_positions(cache.a_k, k.a), b_k = detail::append_positions(cache.b_k, k.b);
  const Tensor3 a_v = detail::append_positions(cache.a_v, v.a), b_v = detail::append_positions(cache.b_v, v.b);
  // The new queries assembled (h d_h numbers per token, never cached); keys and values stay factored.
  const Tensor3 queries = assemble(q.a, q.b);
  const double scale = 1.0 / std::sqrt(static_cast<double>(cfg.head_dim));
  Tensor3 o = Tensor3::from_shape({h, n, d_h});
  std::vector<float> q_t(h * d_h), o_t(h * d_h);
  for (std::size_t t = 0; t < n; ++t) {
    for (std::size_t i = 0; i < h; ++i) std::copy_n(queries.data() + (i * n + t) * d_h, d_h, q_t.data() + i * d_h);
    require(attend_from_factors(q_t.data(), past + t + 1, {a_k, b_k, a_v, b_v}, h, d_h, scale, o_t.data()), fn,
            "x gives queries and keys whose attention is undefined: at new token ", t,
            " the scores or the outputs are too large for float (beyond 3.4e38)");
    for (std::size_t i = 0; i < h; ++i) std::copy_n(o_t.data() + i * d_h, d_h, o.data() + (i * n + t) * d_h);
  }
  std::uint64_t macs = 0;
  Tensor2 u = detail::project_from_heads(o, w.w_o, macs);
  cache.a_k = a_k;
  cache.b_k = b_k;
  cache.a_v = a_v;
  cache.b_v = b_v;
  return u;
}

}  // namespace tvlab::opt
