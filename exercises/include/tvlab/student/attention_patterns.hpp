#pragma once
/// @file
/// Exercise 03.1: BigBird's block pattern. Same contract as `tvlab::bigbird_pattern`.

#include <cstddef>
#include <cstdint>

#include "tvlab/core/sparse_pattern.hpp"

namespace tvlab::student {

/// @ingroup ch03
SparsePattern bigbird_pattern(std::size_t n, std::size_t block, std::size_t global_blocks, std::size_t random_blocks,
                              std::uint64_t seed);

}  // namespace tvlab::student
