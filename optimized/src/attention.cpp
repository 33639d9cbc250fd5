#include "tvlab/opt/attention.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <vector>

#include "detail/blas.hpp"
#include "detail/attention_heads.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/opt/softmax.hpp"

namespace tvlab::opt {
namespace {

// ALiBi's bias for the query at position i' and key j: -m_h |i' - j| (0 without ALiBi).
float alibi_bias_of(float slope, long long query_position, std::size_t j) {
  return -slope * static_cast<float>(std::llabs(query_position - static_cast<long long>(j)));
}

// The same bias for keys [begin, end) of a score row, as two loops that vectorise: keys j <= i'
// get -m (i' - j) = m (j - i'), later keys -m (j - i'). float(j) - float(i') is exact below 2^24,
// so every value equals alibi_bias_of's.
void add_alibi_bias(float* row, float slope, long long query_position, std::size_t begin, std::size_t end) {
  const auto split = static_cast<std::size_t>(
      std::clamp(query_position + 1, static_cast<long long>(begin), static_cast<long long>(end)));
  const auto qp = static_cast<float>(query_position);
#pragma omp simd
  for (std::size_t j = begin; j < split; ++j) row[j] += slope * (static_cast<float>(j) - qp);
#pragma omp simd
  for (std::size_t j = split; j < end; ++j) row[j] -= slope * (static_cast<float>(j) - qp);
}

// The mask of one score row, in one visit of the row and with loops that vectorise: the causal
// rule and the window are one key range [begin, end) (`AttentionMask::key_range`; the keys outside
// become -inf), the bias and ALiBi are added only inside it, the boolean mask last.
void mask_row(float* row, const AttentionMask& mask, float alibi_slope, std::size_t seq_q, std::size_t seq_k,
              std::size_t i) {
  const IndexRange keys = mask.key_range(i, seq_q, seq_k);
  if (mask.bias) {
    const float* b = mask.bias->data() + i * seq_k;
#pragma omp simd
    for (std::size_t j = keys.begin; j < keys.end; ++j) row[j] += b[j];
  }
  if (mask.alibi_slopes) add_alibi_bias(row, alibi_slope, mask.query_position(i, seq_q, seq_k), keys.begin, keys.end);
  const float neg_inf = -std::numeric_limits<float>::infinity();
#pragma omp simd
  for (std::size_t j = 0; j < keys.begin; ++j) row[j] = neg_inf;
#pragma omp simd
  for (std::size_t j = keys.end; j < seq_k; ++j) row[j] = neg_inf;
  if (mask.allowed)
    for (std::size_t j = keys.begin; j < keys.end; ++j)
      if (!(*mask.allowed)(i, j)) row[j] = neg_inf;
}

// One head: S = scale * Q K^T (SGEMM), mask and biases in place, softmax per row, O = P V (SGEMM).
void attention_one_head(const float* q, const float* k, const float* v, float* o, std::size_t seq_q,
                        std::size_t seq_k, std::size_t head_dim, std::size_t head_dim_v, float scale,
                        const AttentionMask& mask, float alibi_slope, float* scores) {
  detail::sgemm(seq_q, seq_k, head_dim, scale, q, head_dim, k, head_dim, /*transpose_b=*/true, 0.0f, scores, seq_k);
  if (!mask.is_none())
    for (std::size_t i = 0; i < seq_q; ++i) mask_row(scores + i * seq_k, mask, alibi_slope, seq_q, seq_k, i);
  for (std::size_t i = 0; i < seq_q; ++i) softmax_row_inplace(scores + i * seq_k, seq_k);
  detail::sgemm(seq_q, head_dim_v, seq_k, 1.0f, scores, seq_k, v, head_dim_v, false, 0.0f, o, head_dim_v);
}

}  // namespace

// ---------------------------------------------------------------------------------------- v1

Tensor3 scaled_dot_product_attention_v1(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                        const AttentionConfig& cfg) {
  const float scale = static_cast<float>(validate_attention("scaled_dot_product_attention", q, k, v, cfg));
  require_supported("scaled_dot_product_attention", cfg.mask, kAttentionMaskSupport);
  const std::size_t heads = q.shape()[0], seq_q = q.shape()[1], head_dim = q.shape()[2];
  const std::size_t seq_k = k.shape()[1], head_dim_v = v.shape()[2];
  const AttentionMask& mask = cfg.mask;
  Tensor3 out = Tensor3::from_shape({heads, seq_q, head_dim_v});
  const int threads = omp_get_max_threads();
  std::vector<float> rows(static_cast<std::size_t>(threads) * seq_k);  // one score row per thread
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const auto total_rows = static_cast<std::ptrdiff_t>(heads * seq_q);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (std::ptrdiff_t r = 0; r < total_rows; ++r) {
    const std::size_t h = static_cast<std::size_t>(r) / seq_q, i = static_cast<std::size_t>(r) % seq_q;
    float* p = rows.data() + static_cast<std::size_t>(omp_get_thread_num()) * seq_k;
    const float* qi = q.data() + (h * seq_q + i) * head_dim;
    const float slope = mask.alibi_slopes ? static_cast<float>((*mask.alibi_slopes)(h)) : 0.0f;
    const long long query_position = mask.query_position(i, seq_q, seq_k);
    // s_j = scale * q_i . k_j (+ b_ij) (- m_h |i' - j|), -inf where the mask forbids j.
    for (std::size_t j = 0; j < seq_k; ++j) {
      if (!mask.allows(i, j, seq_q, seq_k)) {
        p[j] = neg_inf;
        continue;
      }
      const float* kj = k.data() + (h * seq_k + j) * head_dim;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (std::size_t d = 0; d < head_dim; ++d) dot += qi[d] * kj[d];
      p[j] = scale * dot + (mask.bias ? (*mask.bias)(i, j) : 0.0f) + alibi_bias_of(slope, query_position, j);
    }
    softmax_row_inplace(p, seq_k);
    // o_i = sum_j p_j v_j: for each key an axpy over the contiguous value row.
    float* oi = out.data() + (h * seq_q + i) * head_dim_v;
    for (std::size_t d = 0; d < head_dim_v; ++d) oi[d] = 0.0f;
    for (std::size_t j = 0; j < seq_k; ++j) {
      if (p[j] == 0.0f) continue;  // masked keys (and underflowed weights) add nothing
      const float* vj = v.data() + (h * seq_k + j) * head_dim_v;
      const float pj = p[j];
#pragma omp simd
      for (std::size_t d = 0; d < head_dim_v; ++d) oi[d] += pj * vj[d];
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------- v2

namespace detail {

int attention_head_threads(std::size_t heads) {
  return static_cast<int>(std::min<std::size_t>(heads, static_cast<std::size_t>(omp_get_max_threads())));
}

Tensor3 attention_by_heads(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionConfig& cfg, float scale,
                           int threads, const HeadLoader& load_head) {
  const std::size_t heads = q.shape()[0], seq_q = q.shape()[1], head_dim = q.shape()[2];
  const std::size_t seq_k = k.shape()[1], head_dim_v = v.shape()[2];
  // Grouped-query attention (chapter 05): h/g consecutive query heads share one key/value head,
  // read in place (no repeated copies). With g = h every query head has its own.
  const std::size_t group = heads / k.shape()[0];
  Tensor3 out = Tensor3::from_shape({heads, seq_q, head_dim_v});
  // Each thread has its own [seq_q, seq_k] score buffer (the n x n matrix this chapter is
  // about), allocated here: an allocation failure inside the OpenMP region could not be
  // reported as an exception.
  std::vector<float> scores(static_cast<std::size_t>(threads) * seq_q * seq_k);
  auto run_heads = [&] {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (std::ptrdiff_t h = 0; h < static_cast<std::ptrdiff_t>(heads); ++h) {
      const auto hh = static_cast<std::size_t>(h);
      const auto thread = static_cast<std::size_t>(omp_get_thread_num());
      const std::size_t kv_head = hh / group;  // query head t reads kv head floor(t / (h/g))
      const float* qh = q.data() + hh * seq_q * head_dim;
      const float* kh = k.data() + kv_head * seq_k * head_dim;
      if (load_head) load_head(hh, thread, qh, kh);
      // ALiBi's slope belongs to the query head.
      const float slope = cfg.mask.alibi_slopes ? static_cast<float>((*cfg.mask.alibi_slopes)(hh)) : 0.0f;
      attention_one_head(qh, kh, v.data() + kv_head * seq_k * head_dim_v, out.data() + hh * seq_q * head_dim_v,
                         seq_q, seq_k, head_dim, head_dim_v, scale, cfg.mask, slope,
                         scores.data() + thread * seq_q * seq_k);
    }
  };
  if (threads > 1) {
    detail::SingleThreadedBlas single;  // the cores are busy with heads: one BLAS thread each
    run_heads();
  } else {
    run_heads();  // one head (or one core): OpenBLAS may thread each SGEMM itself
  }
  return out;
}

}  // namespace detail

Tensor3 scaled_dot_product_attention_v2(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                        const AttentionConfig& cfg) {
  const float scale = static_cast<float>(validate_attention("scaled_dot_product_attention", q, k, v, cfg));
  require_supported("scaled_dot_product_attention", cfg.mask, kAttentionMaskSupport);
  // Parallel over heads, one thread per head at most.
  return detail::attention_by_heads(q, k, v, cfg, scale, detail::attention_head_threads(q.shape()[0]), nullptr);
}

const std::vector<AttentionVariant>& attention_variants() {
  static const std::vector<AttentionVariant> variants = {
      {"v1", "float loops reordered for contiguous access, vectorised dot products and axpys, threads over rows",
       false, scaled_dot_product_attention_v1},
      {"v2", "both products as OpenBLAS SGEMMs, softmax in place on the score matrix, threads over heads", true,
       scaled_dot_product_attention_v2},
  };
  return variants;
}

Tensor3 scaled_dot_product_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                     const AttentionConfig& cfg) {
  return attention_variants().back().function(q, k, v, cfg);
}

Tensor2 multi_head_attention(const Tensor2& x_q, const Tensor2& x_kv, const MhaWeights& w, int num_heads,
                             const AttentionConfig& cfg) {
  const std::size_t head_dim = validate_mha("multi_head_attention", x_q, x_kv, w, num_heads, cfg);
  const std::size_t heads = static_cast<std::size_t>(num_heads), inner = heads * head_dim;
  const std::size_t seq_q = x_q.shape()[0], seq_k = x_kv.shape()[0], d_model = x_q.shape()[1];

  // [seq, d_model] x [d_model, inner] -> [seq, inner], then split the columns into heads.
  auto project = [&](const Tensor2& x, const Tensor2& weight, std::size_t seq) {
    std::vector<float> flat(seq * inner);
    detail::sgemm(seq, inner, d_model, 1.0f, x.data(), d_model, weight.data(), inner, false, 0.0f, flat.data(), inner);
    Tensor3 t = Tensor3::from_shape({heads, seq, head_dim});
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t i = 0; i < seq; ++i)
        for (std::size_t d = 0; d < head_dim; ++d) t(h, i, d) = flat[i * inner + h * head_dim + d];
    return t;
  };
  const Tensor3 heads_out =
      scaled_dot_product_attention(project(x_q, w.w_q, seq_q), project(x_kv, w.w_k, seq_k), project(x_kv, w.w_v, seq_k), cfg);

  // Concatenate the heads back to [seq_q, inner], then one SGEMM with W_o.
  std::vector<float> concat(seq_q * inner);
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < seq_q; ++i)
      for (std::size_t d = 0; d < head_dim; ++d) concat[i * inner + h * head_dim + d] = heads_out(h, i, d);
  Tensor2 y = Tensor2::from_shape({seq_q, d_model});
  detail::sgemm(seq_q, d_model, inner, 1.0f, concat.data(), inner, w.w_o.data(), d_model, false, 0.0f, y.data(), d_model);
  return y;
}

}  // namespace tvlab::opt
