#pragma once
/// @file
/// Do sinusoidal encodings of positions beyond the training length collide with trained ones?
/// (chapter 02).
///
/// Every encoding has the same length, \f$ |PE(p)|^2 = d/2 \f$, and
/// \f$ PE(p)\cdot PE(p') = \sum_i \cos((p - p')\,\omega_i) \f$, so the cosine similarity of two
/// encodings is a function of their distance alone,
/// \f[ \mathrm{sim}(\Delta) = \frac{2}{d}\sum_{i=0}^{d/2-1} \cos(\Delta\,\omega_i),\qquad
///     \omega_i = \text{base}^{-2i/d}, \f]
/// and the Euclidean distance is \f$ \sqrt{d\,(1 - \mathrm{sim})} \f$. The encoding of \f$ p \ge L \f$
/// is closest to a trained one (\f$ p' < L \f$) where \f$ \mathrm{sim}(p - p') \f$ is largest over
/// \f$ p - L < \Delta \le p \f$.

#include <vector>

namespace tvlab::analysis {

/// \f$ \mathrm{sim}(\Delta) \f$ above, in double. Throws `tvlab::Error` for d_model odd or <= 0,
/// base <= 1.
double sinusoidal_similarity(int d_model, double base, long long distance);

/// For the positions \f$ p \in [\text{first}, \text{last}) \f$ (all \f$ \ge L \f$): the one whose encoding
/// comes closest to a trained encoding \f$ PE(p') \f$, \f$ 0 \le p' < L \f$.
struct NearestTrainedEncoding {
  long long first = 0, last = 0;  ///< the range of positions searched
  long long position = 0;         ///< \f$ p \f$ in it
  long long nearest = 0;          ///< \f$ p' < L \f$
  double similarity = 0;          ///< \f$ \cos(PE(p), PE(p')) \f$
  double distance = 0;            ///< \f$ |PE(p) - PE(p')| = \sqrt{d\,(1 - \text{similarity})} \f$
};

/// One row per range \f$ [e_k, e_{k+1}) \f$ of `edges` (increasing, the first \f$ \ge L \f$).
/// Throws `tvlab::Error` for d_model odd or <= 0, base <= 1, original_length <= 0, fewer than two
/// edges, edges not increasing or the first below original_length.
std::vector<NearestTrainedEncoding> sinusoidal_nearest_trained(int d_model, double base, long long original_length,
                                                               const std::vector<long long>& edges);

/// The frequency pairs whose angle never completes a turn in training, \f$ (L-1)\,\omega_i < 2\pi \f$: beyond
/// \f$ L \f$ their (sin, cos) point reaches values no trained position had.
int sinusoidal_unseen_pairs(int d_model, double base, long long original_length);

}  // namespace tvlab::analysis
