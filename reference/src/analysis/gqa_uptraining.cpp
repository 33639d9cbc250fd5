#include "tvlab/analysis/gqa_uptraining.hpp"

#include <cmath>

#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/attention.hpp"
#include "tvlab/ref/gqa_attention.hpp"

namespace tvlab::analysis {

namespace {

// The MHA layer's heads as an h-head GQA layer with g = h, checked; returns d_model and head_dim.
GqaShape validate_mha_heads(const char* fn, const MhaWeights& mha, const KvHeads& heads) {
  validate_kv_heads(fn, heads);
  return validate_gqa_weights(fn, gqa_weights_from_mha(mha), KvHeads{heads.num_heads, heads.num_heads});
}

// [A | B]: two matrices with the same rows, side by side.
Tensor2 side_by_side(const Tensor2& a, const Tensor2& b) {
  const std::size_t rows = a.shape()[0], ca = a.shape()[1], cb = b.shape()[1];
  Tensor2 out = Tensor2::from_shape({rows, ca + cb});
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < ca; ++j) out(i, j) = a(i, j);
    for (std::size_t j = 0; j < cb; ++j) out(i, ca + j) = b(i, j);
  }
  return out;
}

}  // namespace

GqaWeights mean_pool_kv_heads(const MhaWeights& mha, const KvHeads& heads) {
  const GqaShape shape = validate_mha_heads("mean_pool_kv_heads", mha, heads);
  const std::size_t g = static_cast<std::size_t>(heads.num_kv_heads), r = heads.group_size(), d_k = shape.head_dim;
  GqaWeights gqa{mha.w_q, Tensor2::from_shape({shape.d_model, g * d_k}), Tensor2::from_shape({shape.d_model, g * d_k}),
                 mha.w_o};
  // W_j = (1/r) sum_{i = j r}^{(j+1) r - 1} W_i, entry by entry, for the keys and the values.
  for (std::size_t j = 0; j < g; ++j)
    for (std::size_t c = 0; c < shape.d_model; ++c)
      for (std::size_t d = 0; d < d_k; ++d) {
        double k_sum = 0.0, v_sum = 0.0;
        for (std::size_t i = j * r; i < (j + 1) * r; ++i) {
          k_sum += mha.w_k(c, i * d_k + d);
          v_sum += mha.w_v(c, i * d_k + d);
        }
        gqa.w_k(c, j * d_k + d) = static_cast<float>(k_sum / static_cast<double>(r));
        gqa.w_v(c, j * d_k + d) = static_cast<float>(v_sum / static_cast<double>(r));
      }
  return gqa;
}

MhaWeights mha_weights_with_similar_kv_heads(std::size_t d_model, const KvHeads& heads, std::size_t head_dim,
                                             double rho, std::uint64_t seed) {
  const char* fn = "mha_weights_with_similar_kv_heads";
  require_positive(fn, "d_model", d_model);
  require_positive(fn, "head_dim", head_dim);
  validate_kv_heads(fn, heads);
  require(std::isfinite(rho) && rho >= 0.0 && rho <= 1.0, fn, "rho (", rho, ") must be in [0, 1]");
  const std::size_t h = static_cast<std::size_t>(heads.num_heads), g = static_cast<std::size_t>(heads.num_kv_heads);
  const std::size_t r = heads.group_size();
  checked_element_count(fn, {d_model, h, head_dim});
  Rng rng(seed);
  const double sigma = 1.0 / std::sqrt(static_cast<double>(d_model));  // unit-variance projections of N(0, 1) tokens
  // Drawn in a fixed order whatever rho: shared parts, own parts (keys, then values), w_q, w_o.
  const Tensor2 shared_k = rng.normal_matrix(d_model, g * head_dim, 0.0, sigma);
  const Tensor2 shared_v = rng.normal_matrix(d_model, g * head_dim, 0.0, sigma);
  const Tensor2 own_k = rng.normal_matrix(d_model, h * head_dim, 0.0, sigma);
  const Tensor2 own_v = rng.normal_matrix(d_model, h * head_dim, 0.0, sigma);
  MhaWeights mha;
  mha.w_q = rng.normal_matrix(d_model, h * head_dim, 0.0, sigma);
  mha.w_o = rng.normal_matrix(h * head_dim, d_model, 0.0, 1.0 / std::sqrt(static_cast<double>(h * head_dim)));
  mha.w_k = Tensor2::from_shape({d_model, h * head_dim});
  mha.w_v = Tensor2::from_shape({d_model, h * head_dim});
  // W_i = sqrt(rho) S_{group(i)} + sqrt(1 - rho) E_i: the variance rho + (1 - rho) = 1 of each part
  // is kept, and the covariance of two heads of a group is rho.
  const double a = std::sqrt(rho), b = std::sqrt(1.0 - rho);
  for (std::size_t i = 0; i < h; ++i) {
    const std::size_t j = i / r;
    for (std::size_t c = 0; c < d_model; ++c)
      for (std::size_t d = 0; d < head_dim; ++d) {
        mha.w_k(c, i * head_dim + d) = static_cast<float>(a * shared_k(c, j * head_dim + d) + b * own_k(c, i * head_dim + d));
        mha.w_v(c, i * head_dim + d) = static_cast<float>(a * shared_v(c, j * head_dim + d) + b * own_v(c, i * head_dim + d));
      }
  }
  return mha;
}

double mean_cosine_within_groups(const MhaWeights& mha, const KvHeads& heads) {
  const char* fn = "mean_cosine_within_groups";
  const GqaShape shape = validate_mha_heads(fn, mha, heads);
  require(heads.num_kv_heads < heads.num_heads, fn, "num_kv_heads (", heads.num_kv_heads,
          ") must be below num_heads (", heads.num_heads, "): a group of one head has no pair to compare");
  const std::size_t h = static_cast<std::size_t>(heads.num_heads), r = heads.group_size(), d_k = shape.head_dim;
  // cos(W_a, W_b) = <W_a, W_b> / (|W_a| |W_b|) over the d_model x d_k block of each head.
  auto cosine = [&](const Tensor2& w, std::size_t a, std::size_t b) {
    double ab = 0.0, aa = 0.0, bb = 0.0;
    for (std::size_t c = 0; c < shape.d_model; ++c)
      for (std::size_t d = 0; d < d_k; ++d) {
        const double x = w(c, a * d_k + d), y = w(c, b * d_k + d);
        ab += x * y;
        aa += x * x;
        bb += y * y;
      }
    require(aa > 0.0 && bb > 0.0, fn, "a key or value head is all zero; its cosine is undefined");
    return ab / std::sqrt(aa * bb);
  };
  double sum = 0.0;
  std::size_t pairs = 0;
  for (std::size_t a = 0; a < h; ++a)
    for (std::size_t b = a + 1; b < h && b / r == a / r; ++b) {
      sum += cosine(mha.w_k, a, b) + cosine(mha.w_v, a, b);
      pairs += 2;
    }
  return sum / static_cast<double>(pairs);
}

double relative_frobenius_error(const Tensor2& reference, const Tensor2& approximation) {
  const char* fn = "relative_frobenius_error";
  require_nonempty(fn, "reference", reference);
  require_dim(fn, "approximation", approximation, 0, "rows", reference.shape()[0], "the rows of reference");
  require_dim(fn, "approximation", approximation, 1, "columns", reference.shape()[1], "the columns of reference");
  require_finite(fn, "reference", reference);
  require_finite(fn, "approximation", approximation);
  // sqrt(sum (A - B)^2) / sqrt(sum A^2)
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < reference.shape()[0]; ++i)
    for (std::size_t j = 0; j < reference.shape()[1]; ++j) {
      const double a = reference(i, j), e = a - approximation(i, j);
      diff += e * e;
      norm += a * a;
    }
  require(norm > 0.0, fn, "reference is all zero: no relative error is defined");
  return std::sqrt(diff / norm);
}

std::vector<MeanPoolPoint> mean_pool_error(const UptrainingExperiment& e, const std::vector<double>& rhos) {
  const char* fn = "mean_pool_error";
  require_positive(fn, "experiment.d_model", e.d_model);
  require_positive(fn, "experiment.head_dim", e.head_dim);
  require_positive(fn, "experiment.seq", e.seq);
  require_positive(fn, "experiment.inputs", e.inputs);
  validate_kv_heads(fn, e.heads);
  require(e.heads.num_kv_heads < e.heads.num_heads, fn, "experiment.heads.num_kv_heads (", e.heads.num_kv_heads,
          ") must be below num_heads (", e.heads.num_heads, "): with g = h pooling changes nothing");
  for (double rho : rhos) require(std::isfinite(rho) && rho >= 0.0 && rho <= 1.0, fn, "rhos contains ", rho, ", outside [0, 1]");

  // The same inputs for every rho.
  Rng input_rng(e.seed + 1);
  std::vector<Tensor2> inputs;
  for (std::size_t n = 0; n < e.inputs; ++n) inputs.push_back(input_rng.normal_matrix(e.seq, e.d_model));
  AttentionConfig causal;
  causal.mask.causal = true;

  std::vector<MeanPoolPoint> points;
  for (double rho : rhos) {
    const MhaWeights mha = mha_weights_with_similar_kv_heads(e.d_model, e.heads, e.head_dim, rho, e.seed);
    const GqaWeights pooled = mean_pool_kv_heads(mha, e.heads);
    const MhaWeights pooled_as_mha = repeat_kv_heads(pooled, e.heads);
    MeanPoolPoint p;
    p.rho = rho;
    p.measured_cosine = mean_cosine_within_groups(mha, e.heads);
    // The key and value projections side by side: one relative error for both.
    p.weight_error = relative_frobenius_error(side_by_side(mha.w_k, mha.w_v),
                                              side_by_side(pooled_as_mha.w_k, pooled_as_mha.w_v));
    // The outputs of every input stacked, so the error is over all of them at once.
    Tensor2 y_mha = Tensor2::from_shape({e.inputs * e.seq, e.d_model}), y_gqa = y_mha;
    for (std::size_t n = 0; n < e.inputs; ++n) {
      const Tensor2 a = ref::multi_head_attention(inputs[n], inputs[n], mha, e.heads.num_heads, causal);
      const Tensor2 b = ref::grouped_query_attention(inputs[n], inputs[n], pooled, e.heads, causal);
      xt::view(y_mha, xt::range(n * e.seq, (n + 1) * e.seq), xt::all()) = a;
      xt::view(y_gqa, xt::range(n * e.seq, (n + 1) * e.seq), xt::all()) = b;
    }
    p.output_error = relative_frobenius_error(y_mha, y_gqa);
    points.push_back(p);
  }
  return points;
}

}  // namespace tvlab::analysis
