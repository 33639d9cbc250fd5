#pragma once
// What the decode steps over caches of narrower numbers (bf16: bf16_kv_decode.cpp; INT8, INT4,
// FP8: quantized_kv_attention.cpp) share: how many positions one request to the cache converts.

#include <cstddef>

#include "decode_checks.hpp"

namespace tvlab::opt::detail {

// A cache converted to float on the way is requested 32 positions at a time, within the blocks of
// every decode step (kDecodeBlock: keys and values still read in long runs, each a sequential
// stream for the hardware prefetchers), so that the float rows of a piece (32 x 128 floats,
// 16 KiB) are still in L1 when the scores or P V read them.
inline constexpr std::size_t kConvertedPiece = 32;
static_assert(kDecodeBlock % kConvertedPiece == 0, "a block is a whole number of pieces");

}  // namespace tvlab::opt::detail
