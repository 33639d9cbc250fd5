#include "tvlab/core/kv_heads.hpp"

#include "tvlab/core/error.hpp"

namespace tvlab {

std::size_t KvHeads::group_size() const {
  validate_kv_heads("KvHeads::group_size", *this);
  return static_cast<std::size_t>(num_heads / num_kv_heads);
}

std::size_t KvHeads::kv_head_of(std::size_t query_head) const {
  const std::size_t group = group_size();
  require(query_head < static_cast<std::size_t>(num_heads), "KvHeads::kv_head_of", "query_head (", query_head,
          ") must be below num_heads (", num_heads, ")");
  return query_head / group;
}

void validate_kv_heads(const char* fn, const KvHeads& heads) {
  require_positive(fn, "num_heads", heads.num_heads);
  require_positive(fn, "num_kv_heads", heads.num_kv_heads);
  // Each kv head serves the same number h/g of query heads (Ainslie et al. 2023 use equal groups).
  require(heads.num_heads % heads.num_kv_heads == 0, fn, "num_heads (", heads.num_heads,
          ") must be a multiple of num_kv_heads (", heads.num_kv_heads, ")");
}

void require_layer_tokens(const char* fn, const char* name, const Tensor2& x, const GqaShape& shape) {
  require_nonempty(fn, name, x);
  require_dim(fn, name, x, 1, "d_model", shape.d_model, "the rows of w_q");
  require_finite(fn, name, x);
}

GqaShape validate_gqa_weights(const char* fn, const GqaWeights& w, const KvHeads& heads) {
  validate_kv_heads(fn, heads);
  require_nonempty(fn, "w_q", w.w_q);
  const std::size_t h = static_cast<std::size_t>(heads.num_heads), g = static_cast<std::size_t>(heads.num_kv_heads);
  const std::size_t d_model = w.w_q.shape()[0], q_columns = w.w_q.shape()[1];
  require(q_columns % h == 0, fn, "w_q has ", q_columns, " columns, expected a multiple of num_heads (", h,
          "): num_heads * head_dim");
  const std::size_t head_dim = q_columns / h;
  require_dim(fn, "w_k", w.w_k, 0, "rows", d_model, "d_model, the rows of w_q");
  require_dim(fn, "w_v", w.w_v, 0, "rows", d_model, "d_model, the rows of w_q");
  require_dim(fn, "w_k", w.w_k, 1, "columns", g * head_dim, "num_kv_heads * head_dim");
  require_dim(fn, "w_v", w.w_v, 1, "columns", g * head_dim, "num_kv_heads * head_dim");
  require_dim(fn, "w_o", w.w_o, 0, "rows", h * head_dim, "num_heads * head_dim");
  require_dim(fn, "w_o", w.w_o, 1, "columns", d_model, "d_model, the rows of w_q");
  require_finite(fn, "w_q", w.w_q);
  require_finite(fn, "w_k", w.w_k);
  require_finite(fn, "w_v", w.w_v);
  require_finite(fn, "w_o", w.w_o);
  return {d_model, head_dim};
}

MhaWeights repeat_kv_heads(const GqaWeights& w, const KvHeads& heads) {
  const GqaShape shape = validate_gqa_weights("repeat_kv_heads", w, heads);
  const std::size_t h = static_cast<std::size_t>(heads.num_heads), d_k = shape.head_dim;
  MhaWeights mha{w.w_q, Tensor2::from_shape({shape.d_model, h * d_k}), Tensor2::from_shape({shape.d_model, h * d_k}),
                 w.w_o};
  // MHA head i takes the columns of kv head floor(i / (h/g)).
  for (std::size_t i = 0; i < h; ++i) {
    const std::size_t j = heads.kv_head_of(i);
    for (std::size_t c = 0; c < shape.d_model; ++c)
      for (std::size_t d = 0; d < d_k; ++d) {
        mha.w_k(c, i * d_k + d) = w.w_k(c, j * d_k + d);
        mha.w_v(c, i * d_k + d) = w.w_v(c, j * d_k + d);
      }
  }
  return mha;
}

GqaWeights gqa_weights_from_mha(const MhaWeights& w) { return {w.w_q, w.w_k, w.w_v, w.w_o}; }

}  // namespace tvlab
