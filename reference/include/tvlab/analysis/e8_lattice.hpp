#pragma once
/// @file
/// Chapter 08, the E8 lattice as a quantizer of 8 weights at a time (QuIP#, Tseng et al. 2024;
/// 000 L263). E8 is the densest packing of spheres in 8 dimensions (Viazovska 2016):
/// \f[ E_8 = D_8 \cup (D_8 + \tfrac12 \mathbf 1), \qquad D_8 = \{ z \in \mathbb{Z}^8 : \textstyle\sum_i z_i \text{ even} \}. \f]
/// Its nearest point to any y is cheap (Conway and Sloane, "Sphere Packings, Lattices and Groups",
/// ch. 20): the nearest point of \f$ D_8 \f$ is y rounded coordinate by coordinate, with the coordinate
/// that rounded worst moved to its other neighbour when the sum comes out odd; do the same for
/// \f$ y - \frac12 \f$ and add \f$ \frac12 \f$ back; keep the closer of the two.
///
/// A codebook is a finite piece of the lattice: here the points of norm \f$ \lVert p \rVert^2 \le 10 \f$,
/// 56,881 of them (the shells of norm 0, 2, 4, 6, 8, 10 hold 1, 240, 2160, 6720, 17520 and 30240),
/// which is 15.8 bits per 8 weights: 1.97 bits per weight, a 2-bit format. A group of 8 weights w is
/// coded as the point nearest to w / s (s one scale per row); when that point lies outside the ball,
/// y is shrunk towards 0 until its nearest point lies inside (so the code is a point of the codebook,
/// though not always the nearest one in it). Compared with rounding each weight to one of 4 levels,
/// the lattice packs its points more evenly in 8 dimensions, which is what 2-bit quantization of
/// Gaussian-like (incoherent) weights needs.
///
/// The ball is the plain way to cut a codebook out of the lattice, kept here as the baseline for
/// QuIP#'s own cut, E8P (analysis/e8p.hpp): $ 2^{16} $ points of $ E_8 + rac14 $, exactly 2 bits per weight, a
/// table of 256 entries to decode from, and less error than the ball on Gaussian weights.

#include <array>
#include <cstddef>

#include "tvlab/core/tensor.hpp"

namespace tvlab::analysis {

using Vec8 = std::array<double, 8>;

/// @ingroup ch08
/// The point of \f$ E_8 \f$ nearest to y (ties as the rounding gives them).
Vec8 nearest_e8(const Vec8& y);

/// @ingroup ch08
/// The codebook's radius: points of \f$ \lVert p \rVert^2 \le 10 \f$.
inline constexpr double kE8CodebookNormSq = 10.0;

/// @ingroup ch08
/// Every row of w `[m, n]` (n a multiple of 8) in groups of 8 coded by the ball of E8 points, with the
/// scale per row chosen among \f$ s = \mathrm{rms}(row) / \rho \f$, \f$ \rho \in \{0.5, 0.6, \ldots, 1.5\} \f$, for the
/// least squared error. Errors: n not a multiple of 8, an empty w, a value that is not finite.
DTensor2 e8_quantize_rows(const DTensor2& w);

/// @ingroup ch08
/// The best uniform scalar 2-bit code for comparison: each weight to the nearest of
/// \f$ \Delta\{-\frac32, -\frac12, \frac12, \frac32\} \f$, \f$ \Delta \f$ per row chosen the same way (2 bits per weight).
DTensor2 uniform_2bit_rows(const DTensor2& w);

}  // namespace tvlab::analysis
