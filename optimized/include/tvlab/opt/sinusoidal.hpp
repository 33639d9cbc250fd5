#pragma once
/// @file
/// The sinusoidal position encoding (chapter 02). It is computed once per model and length, so
/// the optimized side uses the reference's function under the same name.

#include "tvlab/ref/sinusoidal.hpp"

namespace tvlab::opt {

using ref::sinusoidal_position_encoding;

}  // namespace tvlab::opt
