#pragma once
/// @file
/// Exercise 04.3: the tile sizes that minimise Algorithm 1's HBM traffic. Same contract as
/// `tvlab::analysis::best_flash_tiles`.

#include <cstddef>

#include "tvlab/analysis/io_model.hpp"

namespace tvlab::student {

/// @ingroup ch04
analysis::FlashTiles best_flash_tiles(std::size_t n, std::size_t d, std::size_t sram_floats);

}  // namespace tvlab::student
