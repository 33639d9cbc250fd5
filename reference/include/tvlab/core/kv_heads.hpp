#pragma once
/// @file
/// Chapter 05: how query heads share key/value heads. Multi-head attention (MHA), multi-query
/// attention (MQA, Shazeer 2019) and grouped-query attention (GQA, Ainslie et al. 2023) differ
/// only in the number \f$ g \f$ of key/value heads beside the \f$ h \f$ query heads:
/// \f$ g = h \f$ is MHA, \f$ g = 1 \f$ is MQA, anything between that divides \f$ h \f$ is GQA.
/// This header holds that mapping and the weights of such a layer; the attention itself is in
/// `tvlab/ref/gqa_attention.hpp`.

#include <cstddef>

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab {

/// @ingroup ch05
/// The head counts of an attention layer, with Hugging Face's names: `num_heads` query heads
/// \f$ h \f$ and `num_key_value_heads` (here `num_kv_heads`) key/value heads \f$ g \f$. The query
/// heads form \f$ g \f$ groups of \f$ h/g \f$ consecutive heads; group \f$ j \f$ reads kv head
/// \f$ j \f$, so query head \f$ i \f$ reads kv head \f$ \lfloor i / (h/g) \rfloor \f$ (the order of
/// Hugging Face's `repeat_kv`, which repeats each kv head \f$ h/g \f$ times in place).
struct KvHeads {
  int num_heads = 1;     ///< \f$ h \f$, query heads
  int num_kv_heads = 1;  ///< \f$ g \f$, key/value heads; divides \f$ h \f$

  /// \f$ h/g \f$: the query heads that share one kv head.
  std::size_t group_size() const;
  /// \f$ \lfloor i / (h/g) \rfloor \f$: the kv head that query head `query_head` reads.
  std::size_t kv_head_of(std::size_t query_head) const;
};

/// @ingroup ch05
/// Checks the head counts for `function`: both positive, and `num_heads` a multiple of
/// `num_kv_heads`. The message names the parameter: `gqa: num_heads (12) must be a multiple of
/// num_kv_heads (5)`.
void validate_kv_heads(const char* function, const KvHeads& heads);

/// @ingroup ch05
/// Projection weights of grouped-query attention, stored so that \f$ Q = X W_q \f$ (as `MhaWeights`):
/// - `w_q` `[d_model, h * head_dim]`: query head \f$ i \f$ uses columns \f$ [i d_k, (i+1) d_k) \f$;
/// - `w_k`, `w_v` `[d_model, g * head_dim]`: kv head \f$ j \f$ uses columns \f$ [j d_k, (j+1) d_k) \f$;
/// - `w_o` `[h * head_dim, d_model]`: the concatenated heads back to the model width.
///
/// With \f$ g = h \f$ this is exactly `MhaWeights`' layout.
struct GqaWeights {
  Tensor2 w_q, w_k, w_v, w_o;
};

/// The sizes of a grouped-query layer, read off its weights by `validate_gqa_weights`.
struct GqaShape {
  std::size_t d_model = 0;   ///< rows of the projections
  std::size_t head_dim = 0;  ///< \f$ d_k \f$ (the same for queries, keys and values)
};

/// @ingroup ch05
/// Checks `heads` (`validate_kv_heads`) and `weights` for `function`: no empty projection, `w_q`
/// `[d_model, h d_k]`, `w_k` and `w_v` `[d_model, g d_k]`, `w_o` `[h d_k, d_model]`, every value
/// finite. Returns d_model and head_dim.
GqaShape validate_gqa_weights(const char* function, const GqaWeights& weights, const KvHeads& heads);

/// @ingroup ch05
/// Checks, for `function`, the tokens `x` `[tokens, d_model]` (named `name`) a layer of that `shape`
/// projects: non-empty, `shape.d_model` columns (the rows of `w_q`), every value finite.
void require_layer_tokens(const char* function, const char* name, const Tensor2& x, const GqaShape& shape);

/// @ingroup ch05
/// The GQA layer as an MHA layer: each kv head's columns of `w_k` and `w_v` repeated \f$ h/g \f$
/// times, so that MHA head \f$ i \f$ gets kv head \f$ \lfloor i/(h/g) \rfloor \f$'s projection
/// (`w_q`, `w_o` unchanged). Both layers compute the same function; the MHA one caches \f$ h/g \f$
/// times more keys and values.
MhaWeights repeat_kv_heads(const GqaWeights& weights, const KvHeads& heads);

/// @ingroup ch05
/// An MHA layer's weights seen as GQA with \f$ g = h \f$ (a copy: the layouts are the same).
GqaWeights gqa_weights_from_mha(const MhaWeights& weights);

}  // namespace tvlab
