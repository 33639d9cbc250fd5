#pragma once
/// @file
/// Chapter 08's exercises: one block of ggml's Q8_0 and Q4_0 formats, byte for byte.

#include <cstdint>

namespace tvlab::student {

/// @ingroup ch08
/// Same contract as `tvlab::ref::quantize_block_q8_0`: 32 floats into 34 bytes.
void quantize_block_q8_0(const float* x, std::uint8_t* block);

/// @ingroup ch08
/// Same contract as `tvlab::ref::quantize_block_q4_0`: 32 floats into 18 bytes.
void quantize_block_q4_0(const float* x, std::uint8_t* block);

}  // namespace tvlab::student
