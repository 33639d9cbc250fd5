#pragma once
/// @file
/// Chapter 06, the reference of kernelised linear attention, in plain loops with double
/// accumulation. Softmax attention weighs value j by \f$ \exp(q_i^\top k_j / \sqrt d) \f$; linear
/// attention by a kernel that factorises, \f$ \phi(q_i)^\top \phi(k_j) \f$, so that the sum over
/// positions can be computed once (Katharopoulos et al. 2020, eq. 4-6):
/// \f[ o_i = \frac{\phi(q_i)^\top \sum_j \phi(k_j)\, v_j^\top}{\phi(q_i)^\top \sum_j \phi(k_j)}
///         = \frac{\big(\phi(Q)\,(\phi(K)^\top V)\big)_i}{\big(\phi(Q)\,(\phi(K)^\top \mathbf 1)\big)_i}, \f]
/// \f$ O(n m d_v) \f$ instead of \f$ O(n^2 d) \f$. Causal linear attention sums only \f$ j \le i \f$: a
/// recurrence over a state of fixed size (\f$ S_t = S_{t-1} + \phi(k_t) v_t^\top \f$,
/// \f$ z_t = z_{t-1} + \phi(k_t) \f$), the masked quadratic form, or chunks of C positions
/// (the state between chunks, a masked product inside each), three ways to the same numbers.
/// Tensors are `[heads, seq, dim]`: q and k `[h, n, d_k]`, v `[h, n, d_v]`.

#include <cstddef>

#include "tvlab/core/linear_attention_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch06
/// \f$ \phi(x) \f$ of every element of x `[h, n, d]` (the three maps of `FeatureMap` act elementwise,
/// so the feature dimension m equals d).
Tensor3 feature_map(const Tensor3& x, FeatureMap map);

/// @ingroup ch06
/// `map` is a `FeatureMap` (elu_plus_one, relu or identity); throws naming `cfg.feature_map` otherwise.
void require_known_feature_map(const char* function, FeatureMap map);

/// @ingroup ch06
/// Non-causal linear attention, every query over every key (the documents' form, 000 L103-L107):
/// \f$ o_i = \text{scale}\,\phi(q_i)^\top S / (\text{scale}\,\phi(q_i)^\top z) \f$ with
/// \f$ S = \sum_j \phi(k_j) v_j^\top \f$, \f$ z = \sum_j \phi(k_j) \f$, or the numerator alone when
/// `cfg.normalize` is false. Throws, naming `cfg.feature_map`, when a normaliser
/// \f$ \phi(q_i)^\top z \f$ is zero (ReLU features of a query and keys with no positive
/// coordinate in common).
/// @param q `[h, n_q, d_k]`
/// @param k `[h, n_k, d_k]`
/// @param v `[h, n_k, d_v]`
/// @return `[h, n_q, d_v]`
Tensor3 linear_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const LinearAttentionConfig& cfg);

/// @ingroup ch06
/// Causal linear attention as a recurrence, one token at a time (Katharopoulos et al. 2020,
/// eq. 10-12; 004 L98-L110): from `state` (the sums over the positions before, zeros for a new
/// sequence),
/// \f[ S_t = S_{t-1} + \phi(k_t)\, v_t^\top, \qquad z_t = z_{t-1} + \phi(k_t), \qquad
///     o_t = \frac{\text{scale}\,\phi(q_t)^\top S_t}{\text{scale}\,\phi(q_t)^\top z_t}. \f]
/// `state` is updated to the sums over every position given, so that a sequence split into
/// pieces, each passed with the state the previous one left, gives the outputs of one pass.
/// The state is unchanged when the call throws.
/// @param q `[h, n, d_k]`
/// @param k `[h, n, d_k]`
/// @param v `[h, n, d_v]`
/// @param state `[h, d_k, d_v]` and `[h, d_k]`, updated
/// @return `[h, n, d_v]`
Tensor3 causal_linear_attention_recurrent(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                          const LinearAttentionConfig& cfg, LinearAttentionState& state);

/// @ingroup ch06
/// The shapes alone of `validate_linear_attention_state`: s `[heads, features, value_dim]` and z
/// `[heads, features]` (the heads and d_k of q, the d_v of v), for a caller that finds a non-finite
/// state otherwise: a decode step, whose outputs show any non-finite value of the S it reads.
void validate_linear_attention_state_shape(const char* function, const LinearAttentionState& state,
                                           std::size_t heads, std::size_t features, std::size_t value_dim);

/// @ingroup ch06
/// Causal linear attention in its parallel (masked, quadratic) form, from an empty state:
/// \f$ A = \phi(Q)\phi(K)^\top \odot M \f$ with \f$ M_{ij} = [j \le i] \f$, \f$ o_i = (AV)_i / (A\mathbf 1)_i \f$
/// (the numerator alone unnormalised). \f$ O(n^2 d) \f$: the form training uses on short sequences,
/// and the oracle of the other two.
Tensor3 causal_linear_attention_parallel(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                         const LinearAttentionConfig& cfg);

/// @ingroup ch06
/// Causal linear attention in chunks of `chunk_size` positions (the last chunk may be shorter):
/// for chunk c, the state of every chunk before it, and a masked product inside it,
/// \f[ O_{[c]} = \phi(Q_{[c]})\, S_{[c-1]} + \big(\phi(Q_{[c]})\phi(K_{[c]})^\top \odot M\big) V_{[c]}, \qquad
///     S_{[c]} = S_{[c-1]} + \phi(K_{[c]})^\top V_{[c]}, \f]
/// and the normaliser alike with \f$ \mathbf 1 \f$ in place of V. C = 1 is the recurrence, C = n
/// the parallel form. `state` as in `causal_linear_attention_recurrent`.
/// @param chunk_size C >= 1
Tensor3 causal_linear_attention_chunked(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                        const LinearAttentionConfig& cfg, std::size_t chunk_size,
                                        LinearAttentionState& state);

/// Checks the inputs every backend's linear attention takes, for `function`: q, k, v non-empty and
/// finite, of one head count, q and k of one width d_k, k and v of one length (and q of that length
/// too when `same_length`, as the causal forms pair position i of each); the feature map known and
/// the scale positive. Throws `tvlab::Error` naming the parameter.
void validate_linear_attention_inputs(const char* function, const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                      const LinearAttentionConfig& cfg, bool same_length);

/// Checks that `state` fits q and v (`[h, d_k, d_v]` and `[h, d_k]`, finite), naming `state.s` or
/// `state.z`.
void validate_linear_attention_state(const char* function, const LinearAttentionState& state, const Tensor3& q,
                                     const Tensor3& v);

}  // namespace tvlab::ref
