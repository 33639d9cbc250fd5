#pragma once
/// @file
/// One decode step over a bf16 KV cache on the CPU (chapter 05). Must match
/// `tvlab::ref::bf16_kv_decode_attention`.
///
/// A decode step reads every cached key and value once and does about 4 flops with each, so it is
/// limited by how many bytes it reads: a bf16 cache, half the size of float's (4096 bytes a position
/// for K and V at g = 8, d = 128, against 8192), is read in about half the time, provided turning
/// it back into floats costs less than the bytes it saves. A bf16 value is the top half of the
/// float it stands for, so the conversion is a 16-bit shift, exact, and it is done *inside* the
/// kernel, never into a float copy of the cache (which would be written and read again at float's
/// size): the kernel is `gqa_decode_attention_v2`'s split-K flash-decoding, which asks for the keys
/// (then the values) of a block 32 positions at a time and widens each piece into a per-thread
/// buffer of 32 rows (16 KiB at d = 128, which stays in L1 until the scores or \f$ P V \f$ read it).

#include <cstddef>
#include <optional>

#include "tvlab/core/kv_bf16.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/gqa_decode.hpp"

namespace tvlab::opt {

/// @ingroup ch05
/// The decode step over a bf16 cache with the positions cut into `splits` ranges, as
/// `gqa_decode_attention_v2` cuts them (0: `gqa_decode_splits` for this machine's thread count),
/// each block of keys and of values widened to float (a 16-bit shift) in an L1 buffer as it is
/// read. Same contract as `ref::bf16_kv_decode_attention` otherwise; any number of splits gives the
/// same result up to float rounding. `tvlab::Error` naming `splits` when it exceeds `length`.
ref::GqaDecodeOutput bf16_kv_decode_attention_split_k(const Tensor2& q, const Bf16Kv& k_cache, const Bf16Kv& v_cache,
                                                      std::size_t length, std::optional<double> scale,
                                                      std::size_t splits);

/// @ingroup ch05
/// The decode step over a bf16 cache: `bf16_kv_decode_attention_split_k` with the splits chosen for
/// this machine. Same arguments, result (up to float rounding) and errors as
/// `ref::bf16_kv_decode_attention`.
/// @param q `[num_heads, head_dim]`, num_heads a multiple of the cache's heads
/// @param k_cache keys `[num_kv_heads, capacity, head_dim]`
/// @param v_cache values `[num_kv_heads, capacity, head_dim_v]`
/// @param length positions attended, in [1, capacity]
/// @param scale default \f$ 1/\sqrt{d_k} \f$
ref::GqaDecodeOutput bf16_kv_decode_attention(const Tensor2& q, const Bf16Kv& k_cache, const Bf16Kv& v_cache,
                                              std::size_t length, std::optional<double> scale = std::nullopt);

}  // namespace tvlab::opt
