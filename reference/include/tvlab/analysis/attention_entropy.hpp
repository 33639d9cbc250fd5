#pragma once
/// @file
/// How spread out attention becomes as the context grows past the pre-training length, with and
/// without YaRN's attention factor (chapter 02).
///
/// The entropy of one query's attention weights \f$ p_j \f$ over \f$ n \f$ keys,
/// \f$ H = -\sum_j p_j \ln p_j \f$, is 0 when all the weight is on one key (sharp) and
/// \f$ \ln n \f$ when it is spread evenly (flat). For scores that are independent draws of
/// \f$ N(0, \sigma^2) \f$, \f$ H \to \ln n - \sigma^2/2 \f$ as \f$ n \f$ grows: longer contexts flatten
/// attention by \f$ \ln \f$ (length ratio). YaRN multiplies cos and sin by
/// \f$ a_f = 0.1\ln s + 1 \f$, so every logit by \f$ a_f^2 \f$ and \f$ \sigma^2 \f$ by \f$ a_f^4 \f$:
/// it sharpens. Random (untrained) q and k: this shows the geometry, not a trained model's behaviour.

#include <cstdint>
#include <vector>

namespace tvlab::analysis {

/// The mean entropy (nats) of the attention of the query at position \f$ n - 1 \f$ over keys
/// \f$ 0 \dots n-1 \f$ (causal, the last row), scores \f$ (R_{n-1} q)\cdot(R_j k_j)/\sqrt d \f$.
struct AttentionEntropyRow {
  long long length = 0;           ///< \f$ n \f$
  double uniform = 0;             ///< \f$ \ln n \f$: the entropy of evenly spread attention (the largest)
  double original = 0;            ///< the pre-training frequencies, no extension
  double yarn = 0;                ///< YaRN's frequencies, cos and sin not multiplied by \f$ a_f \f$
  double yarn_with_factor = 0;    ///< YaRN's frequencies and its attention factor: logits times \f$ a_f^2 \f$
  double attention_factor = 1;    ///< \f$ a_f \f$ (YaRN, factor s)
};

/// Runs the experiment for each length: `samples` random queries and, per sample, one random key
/// per position (N(0, 1) entries, deterministic for a seed), head_dim d, base b, original length L
/// and factor s (YaRN with \f$ \beta_{fast} = 32 \f$, \f$ \beta_{slow} = 1 \f$, half-split pairs).
/// Throws `tvlab::Error` for head_dim odd or <= 2, original_length <= 0, factor < 1, samples <= 0,
/// an empty `lengths` or a length <= 0.
std::vector<AttentionEntropyRow> attention_entropy(int head_dim, double base, long long original_length, double factor,
                                                   const std::vector<long long>& lengths, int samples,
                                                   std::uint64_t seed);

/// \f$ H(p) = -\sum_j p_j \ln p_j \f$ of \f$ p = \mathrm{softmax}(x) \f$, computed in double as
/// \f$ \ln Z + M - \sum_j p_j x_j \f$ with \f$ M = \max_j x_j \f$, \f$ Z = \sum_j e^{x_j - M} \f$.
/// Throws `tvlab::Error` for an empty or non-finite x.
double softmax_entropy(const std::vector<double>& x);

}  // namespace tvlab::analysis
