#pragma once
/// @file
/// What happens to RoPE scores beyond the pre-training length, without a trained model (chapter 02).
///
/// A model trained on positions \f$ 0 \dots L-1 \f$ has seen pair \f$ i \f$ rotated by angles
/// \f$ m\theta_i \le (L-1)\theta_i \f$ only. Pairs with \f$ (L-1)\theta_i < 2\pi \f$ never complete a
/// turn, so at longer distances they take angles the model never saw. The experiment measures, for
/// random (untrained) q and k, how often the scores at distances \f$ L \dots sL-1 \f$ leave the range
/// the same q and k produce at distances \f$ 0 \dots L-1 \f$ with the original frequencies, and how
/// much each method changes the short-range scores the model was trained on. It says nothing about
/// a trained model's accuracy (its q and k are not random, and it may rely on some pairs more than
/// others); it shows which frequencies each method moves and what that does to the geometry.

#include <cstdint>
#include <string>
#include <vector>

#include "tvlab/core/rope_config.hpp"

namespace tvlab::analysis {

/// One context-extension method: its name and the frequencies it uses for the extended length.
struct ExtensionMethod {
  std::string name;  ///< "default (none)", "PI (linear)", ...
  RopeFrequencies freqs;
};

/// The chapter's methods for head_dim d, base b, original length L and factor s: default, PI
/// (linear), the document's static NTK-aware base (\f$ \alpha = s \f$), dynamic NTK evaluated at
/// length \f$ sL \f$, and YaRN (\f$ \beta_{fast} = 32 \f$, \f$ \beta_{slow} = 1 \f$).
std::vector<ExtensionMethod> extension_methods(int head_dim, double base, long long original_length, double factor);

struct ExtrapolationRow {
  std::string method;
  int unseen_angle_pairs = 0;      ///< pairs reaching an angle beyond \f$ L\theta_i \f$ by position \f$ sL-1 \f$
  double outside_range = 0;        ///< fraction of (sample, distance in [L, sL)) whose score \f$ q\cdot R_\Delta k \f$ is outside [min, max] of the original scores at distances [0, L)
  double self_below_minimum = 0;   ///< the same for a key equal to the query, below the smallest original score
  double short_range_change = 0;   ///< RMS change of the scores at distances [0, 64) relative to their RMS
  double neighbour_resolution = 0; ///< \f$ \theta'_0 / \theta_0 \f$: how far apart neighbouring tokens stay (NaN: no rotation)
  /// The softmax weight that the query at position \f$ sL-1 \f$ gives to the keys at distances
  /// \f$ \ge L \f$ (those never seen in training), the same key at every distance:
  /// \f$ \sum_{\Delta \ge L} e^{s(\Delta)} / \sum_{\Delta < sL} e^{s(\Delta)} \f$.
  double weight_beyond_original = 0;
};

/// Runs the experiment for every method of `extension_methods` with `samples` random (q, k)
/// pairs of N(0, 1) entries (deterministic for a seed). cos/sin are not multiplied by YaRN's
/// attention factor here: the temperature scales every logit alike and is reported apart.
/// Throws `tvlab::Error` for head_dim odd or <= 2, original_length < 64, factor < 1, samples <= 0.
std::vector<ExtrapolationRow> rope_extrapolation(int head_dim, double base, long long original_length, double factor,
                                                 int samples, std::uint64_t seed);

/// ALiBi on the same footing as `rope_extrapolation` (same samples for the same seed): no rotation,
/// the score is \f$ q\cdot k/\sqrt d - m_h\,\Delta \f$ with sample \f$ n \f$ in head
/// \f$ h = n \bmod \text{num\_heads} \f$ (`ref::alibi_slopes`). Nothing about the method changes with the
/// length, so there are no unseen angles and no short-range change, and `neighbour_resolution` is NaN.
/// With the same key at every distance \f$ q\cdot k \f$ cancels in the softmax, and the weight beyond
/// \f$ L \f$ is \f$ (e^{-m L} - e^{-m sL}) / (1 - e^{-m sL}) \f$.
/// Throws `tvlab::Error` as `rope_extrapolation`, and for num_heads <= 0.
ExtrapolationRow alibi_extrapolation(int head_dim, long long original_length, double factor, int num_heads, int samples,
                                     std::uint64_t seed);

}  // namespace tvlab::analysis
