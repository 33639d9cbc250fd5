#pragma once
/// @file
/// Chapter 05, the reference: decoding with a KV cache. Autoregressive generation produces one
/// token at a time, and the new token's query attends to the keys and values of every earlier
/// token; those do not change, so they are computed once and kept (document 000, "KV 缓存优化").
/// A cache holds, for one attention layer, \f$ g \f$ key and \f$ g \f$ value heads of up to
/// `capacity` positions, contiguously; a model keeps one per layer. `prefill` runs the prompt
/// through causal attention and writes its keys and values, `decode` does one token.

#include <cstddef>
#include <cstdint>
#include <optional>

#include "tvlab/core/kv_heads.hpp"
#include "tvlab/core/rope_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch05
/// One layer's contiguous KV cache: keys and values `[num_kv_heads, capacity, head_dim]`, of which
/// the first `length()` positions hold tokens. With \f$ g \f$ kv heads it holds
/// \f$ 2 g\, d_k \f$ numbers per token, \f$ g/h \f$ of what multi-head attention would hold.
/// The free slots hold NaN, so a computation that read past `length()` would show it.
class KvCache {
 public:
  /// An empty cache for `heads` (checked by `validate_kv_heads`) and `head_dim`, with room for
  /// `capacity` positions; both sizes must be positive.
  KvCache(const KvHeads& heads, std::size_t head_dim, std::size_t capacity);

  const KvHeads& heads() const { return heads_; }   ///< \f$ h \f$ and \f$ g \f$
  std::size_t head_dim() const { return head_dim_; }  ///< \f$ d_k \f$
  std::size_t capacity() const { return capacity_; }  ///< positions it can hold
  std::size_t length() const { return length_; }      ///< positions it holds
  /// `[num_kv_heads, capacity, head_dim]`; positions `[0, length())` are the cached keys.
  const Tensor3& keys() const { return keys_; }
  /// `[num_kv_heads, capacity, head_dim]`; positions `[0, length())` are the cached values.
  const Tensor3& values() const { return values_; }

  /// Writes the keys and values of `t` new positions after the cached ones:
  /// `keys()(j, length() + i, d) = k(j, i, d)`, the same for v; then length() grows by t.
  /// @param k `[num_kv_heads, t, head_dim]`, finite
  /// @param v `[num_kv_heads, t, head_dim]`, finite
  /// Throws `tvlab::Error` naming the capacity when `length() + t > capacity()`, and naming k or v
  /// for a wrong shape or a non-finite value; the cache is then unchanged.
  void append(const Tensor3& k, const Tensor3& v);

  /// Forgets every position (length 0), keeping the capacity.
  void clear();

 private:
  KvHeads heads_;
  std::size_t head_dim_ = 0, capacity_ = 0, length_ = 0;
  Tensor3 keys_, values_;
};

/// @ingroup ch05
/// What `prefill`, `decode` and `decode_without_cache` return: the layer's output and the
/// multiply-adds its four projections cost (counted in the loops as they run, so that the tests
/// can hold them against `analysis::decode_projection_macs`, tvlab/analysis/kv_memory.hpp).
struct DecodeOutput {
  Tensor2 output;                   ///< `[tokens, d_model]`
  std::uint64_t projection_macs = 0;  ///< multiply-adds in \f$ XW_q, XW_k, XW_v \f$ and \f$ OW_o \f$
};

/// @ingroup ch05
/// Runs \f$ t \f$ new tokens through a causal grouped-query attention layer and caches their
/// keys and values: with \f$ n_0 \f$ = `cache.length()` positions already cached, query \f$ i \f$
/// (position \f$ n_0 + i \f$) attends to positions \f$ 0 \dots n_0 + i \f$ (the causal mask with the
/// bottom-right alignment):
/// \f[ k^{(j)}_{n_0+i} = x_i W_k^{(j)},\quad v^{(j)}_{n_0+i} = x_i W_v^{(j)},\quad
///     y_i = \mathrm{Concat}_t\Big(\sum_{p \le n_0+i} \mathrm{softmax}_p\big(\text{scale}\; q^{(t)}_i \cdot k^{(\kappa(t))}_p\big)\, v^{(\kappa(t))}_p\Big) W_o. \f]
/// On an empty cache this is the prompt's prefill, equal to `grouped_query_attention(x, x, ...)`
/// with a causal mask; on a filled one it is a chunk of a longer prompt. With `rope`, the query and
/// the key of position \f$ p \f$ are rotated at \f$ p_0 + p \f$ (`rope.first_position` = \f$ p_0 \f$)
/// before the key is cached: the cache holds rotated keys, so no cached key is ever rotated again.
/// @param cache the layer's cache; its heads and head_dim must be those of `weights`
/// @param x `[t, d_model]`, t >= 1
/// @param weights the layer's projections
/// @param heads \f$ h \f$ and \f$ g \f$
/// @param rope rotary position embeddings (chapter 02), or none
/// @return the outputs `[t, d_model]`; \f$ t\, d\, d_k (2h + 2g) \f$ projection multiply-adds
/// Throws `tvlab::Error` (naming the parameter, or the capacity when the t tokens do not fit)
/// before changing the cache.
DecodeOutput prefill(KvCache& cache, const Tensor2& x, const GqaWeights& weights, const KvHeads& heads,
                     const std::optional<AttentionRope>& rope = std::nullopt);

/// @ingroup ch05
/// One generation step: `prefill` of a single token. Projects its query, key and value, appends
/// the key and value to the cache, and attends over every cached position; the earlier tokens'
/// keys and values are read, not recomputed. \f$ d\, d_k (2h + 2g) \f$ projection multiply-adds,
/// whatever the length.
/// @param cache the layer's cache
/// @param x_token `[1, d_model]`
/// @param weights the layer's projections
/// @param heads \f$ h \f$ and \f$ g \f$
/// @param rope rotary position embeddings, as for `prefill`
DecodeOutput decode(KvCache& cache, const Tensor2& x_token, const GqaWeights& weights, const KvHeads& heads,
                    const std::optional<AttentionRope>& rope = std::nullopt);

/// @ingroup ch05
/// The same step without a cache: the output of the last of the \f$ n \f$ tokens of `x`, with the
/// keys and values of all \f$ n \f$ tokens recomputed from `x` (the query and the output projection
/// only for the last). \f$ 2 n\, d\, g\, d_k + 2 d\, h\, d_k \f$ projection multiply-adds: generating
/// \f$ n \f$ tokens this way costs \f$ \Theta(n^2 d\, g\, d_k) \f$ instead of \f$ \Theta(n\, d\, h\, d_k) \f$.
/// @param x `[n, d_model]`, every token so far (the last one is the new token)
/// @param weights the layer's projections
/// @param heads \f$ h \f$ and \f$ g \f$
/// @param rope rotary position embeddings (token \f$ p \f$ at position \f$ p_0 + p \f$), or none
/// @return the last token's output `[1, d_model]`
DecodeOutput decode_without_cache(const Tensor2& x, const GqaWeights& weights, const KvHeads& heads,
                                  const std::optional<AttentionRope>& rope = std::nullopt);

/// The checks `prefill` and `decode` (and their optimized pairs) make for `function` before
/// touching the cache: the weights against `heads` (`validate_gqa_weights`), the cache's heads and
/// head_dim against the layer's, and the tokens `x` (named `x_name`) non-empty, finite, of the
/// weights' d_model. Returns the layer's sizes; throws `tvlab::Error` naming the part otherwise.
GqaShape validate_cached_step(const char* function, const KvCache& cache, const Tensor2& x, const char* x_name,
                              const GqaWeights& weights, const KvHeads& heads);

}  // namespace tvlab::ref
