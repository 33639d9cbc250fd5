#pragma once
/// @file
/// Chapter 06, what a linear-attention layer keeps while generating, against chapter 05's KV cache:
/// the recurrent state \f$ S \in \mathbb{R}^{d_k \times d_v} \f$ of every head (and, for normalised
/// linear attention, the normaliser \f$ z \in \mathbb{R}^{d_k} \f$) has the same size at every
/// position, where a softmax layer's cache grows by \f$ 2 g d_h \f$ numbers per token.

#include <vector>

#include "tvlab/analysis/attention_cost.hpp"
#include "tvlab/core/model_config.hpp"

namespace tvlab::analysis {

/// @ingroup ch06
/// The state of one layer: `heads` heads of \f$ d_k d_v \f$ numbers, plus \f$ d_k \f$ each with a
/// normaliser, in `dtype`. Throws, naming the parameter, unless every size is positive.
double linear_state_bytes_per_layer(long long heads, long long d_k, long long d_v, bool normaliser, DType dtype);

/// @ingroup ch06
/// One row of `state_against_kv_cache`.
struct StateAgainstCache {
  long long context = 0;      ///< tokens generated so far (prompt included)
  double state_bytes = 0;     ///< the linear layers' states, all layers, one sequence: constant
  double kv_cache_bytes = 0;  ///< chapter 05's `kv_cache_size(model, context, 1, dtype).bytes_per_sequence`
};

/// @ingroup ch06
/// `model` as it is (softmax attention, its KV cache) against the same model with every attention
/// layer linear, each with `model`'s query heads as state heads of \f$ d_k = d_v = \f$ head_dim, no
/// normaliser (the delta-rule family's state), at each context, in `dtype`.
std::vector<StateAgainstCache> state_against_kv_cache(const ModelConfig& model, const std::vector<long long>& contexts,
                                                      DType dtype);

/// @ingroup ch06
/// The context at which `model`'s KV cache reaches the linear state of `state_against_kv_cache`:
/// \f$ h\, d_h^2 / (2 g d_h) = h\, d_h / (2 g) \f$ tokens, the same in every layer and dtype.
double break_even_context(const ModelConfig& model);

}  // namespace tvlab::analysis
