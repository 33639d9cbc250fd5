#pragma once
/// @file
/// Exercise 03.2: the receptive field of stacked attention layers. Same contract as
/// `tvlab::analysis::receptive_field`.

#include <cstddef>
#include <vector>

#include "tvlab/core/sparse_pattern.hpp"

namespace tvlab::student {

/// @ingroup ch03
std::vector<bool> receptive_field(const std::vector<SparsePattern>& layers, std::size_t position);

}  // namespace tvlab::student
