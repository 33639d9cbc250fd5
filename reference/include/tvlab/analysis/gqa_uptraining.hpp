#pragma once
/// @file
/// Chapter 05: turning a trained multi-head layer into a grouped-query one. Ainslie et al. (2023,
/// "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head Checkpoints", §2.1)
/// build each group's key and value head by mean-pooling the projections of the original heads in
/// that group, then continue training for a small fraction of the original steps ("uptraining").
/// What the pooling alone costs depends on how alike the pooled heads were: this header measures
/// the output error of the converted layer against the similarity of its heads.

#include <cstdint>
#include <vector>

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/kv_heads.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::analysis {

/// @ingroup ch05
/// Mean-pools an MHA layer's key and value heads into \f$ g \f$ groups of \f$ r = h/g \f$
/// consecutive heads (Ainslie et al. 2023, §2.1):
/// \f[ W^{K}_{j} = \frac{1}{r} \sum_{i = j r}^{(j+1) r - 1} W^{K}_{i}, \qquad
///     W^{V}_{j} = \frac{1}{r} \sum_{i = j r}^{(j+1) r - 1} W^{V}_{i}, \f]
/// the document 004's "the mean of the projection matrices of the h/g heads merged into one group"
/// (its \f$ \frac{g}{h} \sum \f$). `w_q` and `w_o` are kept. With \f$ g = h \f$ it changes nothing.
/// @param mha `[d_model, h d_k]` projections (`w_o` `[h d_k, d_model]`)
/// @param heads \f$ h \f$ = the MHA layer's heads, \f$ g \f$ = the kv heads wanted
/// @return the GQA layer: `w_k`, `w_v` `[d_model, g d_k]`
GqaWeights mean_pool_kv_heads(const MhaWeights& mha, const KvHeads& heads);

/// @ingroup ch05
/// MHA weights whose key (and value) heads inside each group of \f$ r = h/g \f$ heads are alike by
/// construction: for head \f$ i \f$ in group \f$ j \f$,
/// \f[ W^{K}_{i} = \sqrt{\rho}\; S^{K}_{j} + \sqrt{1-\rho}\; E^{K}_{i} \f]
/// (the same for \f$ V \f$), with \f$ S \f$ shared by the group and \f$ E \f$ the head's own, all
/// entries independent \f$ \mathcal{N}(0, 1/d) \f$. Two heads of a group then have
/// \f$ \mathbb{E}\langle W_a, W_b\rangle = \rho\, \mathbb{E}\|W_a\|^2 \f$: a cosine similarity
/// \f$ \approx \rho \f$, within about \f$ (1-\rho^2)/\sqrt{d\,d_k} \f$. `w_q` has
/// \f$ \mathcal{N}(0, 1/d) \f$ and `w_o` \f$ \mathcal{N}(0, 1/(h d_k)) \f$ entries. The random
/// numbers are drawn in the same order for every \f$ \rho \f$, so a seed gives the same \f$ S \f$ and
/// \f$ E \f$ whatever \f$ \rho \f$ (common random numbers: curves over \f$ \rho \f$ are smooth).
/// @param d_model \f$ d \f$
/// @param heads \f$ h \f$ heads in \f$ g \f$ groups
/// @param head_dim \f$ d_k \f$
/// @param rho \f$ \rho \in [0, 1] \f$
/// @param seed the random numbers' seed
MhaWeights mha_weights_with_similar_kv_heads(std::size_t d_model, const KvHeads& heads, std::size_t head_dim,
                                             double rho, std::uint64_t seed);

/// @ingroup ch05
/// The mean cosine similarity \f$ \langle W_a, W_b \rangle / (\|W_a\|\,\|W_b\|) \f$ of the key
/// projections (`[d_model, d_k]` blocks of `w_k`) of every pair of heads \f$ a < b \f$ in the same
/// group of \f$ h/g \f$ consecutive heads, and likewise of the value projections: the mean over
/// all those pairs of both. Needs \f$ g < h \f$ (groups with two heads or more).
/// @param mha the MHA layer
/// @param heads \f$ h \f$ = its heads, \f$ g \f$ = the groups
double mean_cosine_within_groups(const MhaWeights& mha, const KvHeads& heads);

/// @ingroup ch05
/// \f$ \|A - B\|_F / \|A\|_F \f$, in double.
/// @param reference \f$ A \f$, not all zero
/// @param approximation \f$ B \f$, the shape of `reference`
double relative_frobenius_error(const Tensor2& reference, const Tensor2& approximation);

/// @ingroup ch05
/// The sizes of the mean-pooling experiment (`mean_pool_error`).
struct UptrainingExperiment {
  std::size_t d_model = 64;   ///< \f$ d \f$
  KvHeads heads{8, 2};        ///< \f$ h \f$ MHA heads pooled into \f$ g \f$ kv heads
  std::size_t head_dim = 16;  ///< \f$ d_k \f$
  std::size_t seq = 32;       ///< tokens per input
  std::size_t inputs = 4;     ///< random inputs \f$ X \f$, entries \f$ \mathcal{N}(0, 1) \f$
  std::uint64_t seed = 5;     ///< seeds the weights and the inputs
};

/// @ingroup ch05
/// One point of the experiment.
struct MeanPoolPoint {
  double rho = 0.0;              ///< the similarity the weights were built with
  double measured_cosine = 0.0;  ///< `mean_cosine_within_groups` of those weights
  /// \f$ \|W^K - \mathrm{repeat}(W^K_\text{pooled})\|_F / \|W^K\|_F \f$ over the key and value
  /// projections together; \f$ \approx \sqrt{(1-\rho)(1 - g/h)} \f$ by construction.
  double weight_error = 0.0;
  /// \f$ \|Y_\text{GQA} - Y_\text{MHA}\|_F / \|Y_\text{MHA}\|_F \f$ of the causal self-attention
  /// outputs over all the inputs: what uptraining has to recover.
  double output_error = 0.0;
};

/// @ingroup ch05
/// For each \f$ \rho \f$: builds MHA weights with `mha_weights_with_similar_kv_heads`, pools them
/// with `mean_pool_kv_heads`, and measures the converted layer (`ref::grouped_query_attention`)
/// against the original (chapter 00's `ref::multi_head_attention`), both causal, on the same
/// random inputs. Needs \f$ g < h \f$ and every \f$ \rho \in [0, 1] \f$.
/// @param experiment the sizes and the seed
/// @param rhos the similarities, e.g. {0, 0.5, 0.7, 0.9, 1}
std::vector<MeanPoolPoint> mean_pool_error(const UptrainingExperiment& experiment, const std::vector<double>& rhos);

}  // namespace tvlab::analysis
