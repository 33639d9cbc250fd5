#pragma once
/// @file
/// Chapter 06: the random features of the Performer (Choromanski et al. 2021, "Rethinking Attention
/// with Performers", FAVOR+): the matrix \f$ W \f$ whose rows \f$ \omega_1, \dots, \omega_m \f$ define
/// the positive random feature map, and how those rows were drawn.

#include <cstddef>
#include <cstdint>
#include <string>

#include "tvlab/core/tensor.hpp"

namespace tvlab {

/// @ingroup ch06
/// How the directions of the rows \f$ \omega_r \f$ are drawn (Performer, section 2.4):
/// - `iid`: every row independent, \f$ \omega_r \sim \mathcal N(0, I_d) \f$;
/// - `orthogonal`: orthogonal random features (ORF, Yu et al. 2016): the rows come in blocks of d
///   that are exactly orthogonal to each other (the Gram-Schmidt process applied to a Gaussian
///   matrix), independent from block to block; when m is not a multiple of d, the last block has
///   m mod d rows. Orthogonal rows cannot all point the same way, which lowers the variance of the
///   estimate (Performer, Theorem 2).
enum class RandomFeatureKind { iid, orthogonal };

/// "iid", "orthogonal".
std::string to_string(RandomFeatureKind kind);

/// @ingroup ch06
/// The lengths \f$ \|\omega_r\| \f$ of the rows, whose directions `RandomFeatureKind` chose:
/// - `chi`: the length of a \f$ \mathcal N(0, I_d) \f$ vector, \f$ \chi(d) \f$-distributed: an iid row
///   keeps its own, an orthogonal row the length of the Gaussian row it was orthogonalised from. A
///   Gaussian vector's length is independent of its direction, and so of every direction of the
///   block, so every row is still marginally \f$ \mathcal N(0, I_d) \f$ and the estimate
///   \f$ \phi^+(x)^\top \phi^+(y) \f$ of \f$ \exp(x^\top y) \f$ stays unbiased (the same in
///   distribution as the length of a fresh Gaussian vector, which the Performer's code draws);
/// - `sqrt_d`: every row rescaled to length \f$ \sqrt d \f$, the mean of \f$ \|\omega\|^2 \f$. It
///   removes the lengths' spread and with it some variance, but biases the estimate low:
///   \f$ E[\|\omega\|^{2k}] \ge (E\|\omega\|^2)^k = d^k \f$ (Jensen), and \f$ E[\exp(\omega^\top z)] \f$ is a
///   series in these moments, so fixing them lowers every term after the first. The bias shrinks as d
///   grows (the relative spread of \f$ \|\omega\|^2 \f$ is \f$ \sqrt{2/d} \f$).
enum class RowNorms { chi, sqrt_d };

/// "chi", "sqrt_d".
std::string to_string(RowNorms norms);

/// @ingroup ch06
/// The random features of one Performer attention: \f$ W \f$ `[m, d]`, row r the vector
/// \f$ \omega_r \f$ of feature r (m features for keys and queries of width d, shared by every head).
/// `ref::draw_performer_features` draws them from a seed and records how; a W built by hand (a
/// worked example, a test) leaves the record at its defaults. The rows are kept in double: the
/// orthogonality of an ORF block is then exact to about \f$ 10^{-15} \f$.
struct PerformerFeatures {
  DTensor2 w;                                       ///< \f$ W \f$ `[m, d]`
  RandomFeatureKind kind = RandomFeatureKind::iid;  ///< how the directions were drawn
  RowNorms norms = RowNorms::chi;                   ///< how the lengths were drawn
  std::uint64_t seed = 0;                           ///< the seed they were drawn from

  /// m, the number of random features (the rows of W).
  std::size_t num_features() const { return w.shape()[0]; }
  /// d, the width of the keys and queries the features apply to (the columns of W).
  std::size_t head_dim() const { return w.shape()[1]; }
};

/// Checks random features for `function`: at least one row and one column, every entry finite;
/// throws `tvlab::Error` naming `features.w` (`features.w must not be empty (axis 0 has length 0)`).
void validate_performer_features(const char* function, const PerformerFeatures& features);

}  // namespace tvlab
