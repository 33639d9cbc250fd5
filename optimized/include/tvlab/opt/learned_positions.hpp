#pragma once
/// @file
/// Learned absolute position embeddings (chapter 02). The lookup copies table rows: there is
/// nothing to optimize, so the optimized side uses the reference's function under the same name.

#include "tvlab/ref/learned_positions.hpp"

namespace tvlab::opt {

using ref::learned_position_embedding;

}  // namespace tvlab::opt
