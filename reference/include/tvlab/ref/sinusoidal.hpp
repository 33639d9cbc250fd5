#pragma once
/// @file
/// The 2017 sinusoidal absolute position encoding (chapter 02).

#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch02
/// `[seq, d_model]` with \f$ PE(p, 2i) = \sin(p\,\omega_i) \f$, \f$ PE(p, 2i+1) = \cos(p\,\omega_i) \f$,
/// \f$ \omega_i = \text{base}^{-2i/d} \f$, for positions \f$ p = \text{first\_position} \dots \f$.
/// Because \f$ PE(p)\cdot PE(p+k) = \sum_i \cos(k\,\omega_i) \f$, the dot product of two encodings
/// depends only on their distance.
Tensor2 sinusoidal_position_encoding(long long seq, int d_model, double base = 10000.0, long long first_position = 0);

}  // namespace tvlab::ref
