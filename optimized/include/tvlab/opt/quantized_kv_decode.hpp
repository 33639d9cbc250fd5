#pragma once
/// @file
/// One decode step over a KV cache of narrower numbers on the CPU (chapter 05): bf16, or INT8,
/// INT4 and FP8 E4M3 codes with their scales (`tvlab/core/kv_quant.hpp`). Must match
/// `tvlab::ref::bf16_kv_decode_attention` and `tvlab::ref::quantized_kv_decode_attention`.
///
/// A decode step reads every cached key and value once and does about 4 flops with each, so it is
/// limited by how many bytes it reads: a cache half or a quarter the size of float's is read in
/// about half or a quarter of the time, provided turning the codes back into floats costs less
/// than the bytes it saves. So the codes are dequantized *inside* the kernel, never into a float
/// copy of the cache (which would be written and read again at float's size): the kernel is
/// `gqa_decode_attention_v2`'s split-K flash-decoding (the same blocks of 512 positions), and
/// where it reads the keys (then the values) of a block, it asks for them 32 positions at a time and
/// turns each piece's codes into floats in a per-thread buffer of 32 rows (16 KiB at d = 128, which
/// stays in L1 until the scores or \f$ P V \f$ read it):
/// \f[ \hat x = s\,q \;\text{(symmetric)}, \qquad \hat x = z + s\,q \;\text{(asymmetric)}, \qquad
///     \hat x = s\,\mathrm{e4m3}(q) \;\text{(FP8)}, \f]
/// with the scale \f$ s \f$ (and minimum \f$ z \f$) of the element's group: per token, one per
/// `group_size` channels of the row; per channel (KIVI's keys), the row of d scales of the row's
/// group of tokens. The scores, the online softmax and \f$ P V \f$ then run on the buffer as on a
/// float cache. The conversions are vectorised, 16 codes at a time with AVX-512: INT8 by sign
/// extension, INT4 by masking and shifting nibbles, E4M3 by moving its bits into a float's
/// exponent and mantissa fields and multiplying by \f$ 2^{120} \f$ (exact, subnormals included).
///
/// | cache (g = 8, d = 128) | bytes per position, K + V: codes + scales (and minimums) | of float's |
/// | --- | --- | --- |
/// | float | 8192 | 1 |
/// | bf16 | 4096 | 1/2 |
/// | INT8 per token, FP8 E4M3 per token | 2048 + 64 | 0.26 |
/// | INT8 keys per channel (groups of 32 tokens), values per token | 2048 + 160 | 0.27 |
/// | INT4 per group of 32, asymmetric | 1024 + 512 | 0.19 |

#include <cstddef>
#include <optional>

#include "tvlab/core/kv_bf16.hpp"
#include "tvlab/core/kv_quant.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/gqa_decode.hpp"

namespace tvlab::opt {

/// @ingroup ch05
/// The decode step over a bf16 cache: `gqa_decode_attention_v2` with each block of keys and of
/// values widened to float (a 16-bit shift) in an L1 buffer as it is read. Same contract as
/// `ref::bf16_kv_decode_attention`; `splits` as `gqa_decode_attention_v2` (0: chosen for this
/// machine, at most `length`).
ref::GqaDecodeOutput bf16_kv_decode_attention(const Tensor2& q, const Bf16Kv& k_cache, const Bf16Kv& v_cache,
                                              std::size_t length, std::optional<double> scale = std::nullopt,
                                              std::size_t splits = 0);

/// @ingroup ch05
/// The decode step over quantized keys and values, attending to their first `length` positions
/// (the quantized tensors' `seq` is the cache's capacity): with `length = k.seq`, the contract of
/// `ref::quantized_kv_decode_attention`,
/// \f[ o_i = \sum_{t < \text{length}} \mathrm{softmax}_t\!\big(\text{scale}\; q_i \cdot \hat k_{g(i), t}\big)\, \hat v_{g(i), t}, \f]
/// computed in float, the codes dequantized a block at a time inside the kernel (this file's
/// comment). Every spec `validate_kv_quant_spec` accepts: INT8, INT4 or FP8 codes, per token or
/// per channel, symmetric or not; INT4 needs an even head_dim (each token's codes start on a byte).
/// `tvlab::Error` naming the parameter for q, k, v (empty, inconsistent codes/scales, shapes that
/// differ), `length` outside [1, k.seq], the scale or `splits` (> length).
/// @param q `[num_heads, head_dim]`, num_heads a multiple of k's heads
/// @param k quantized keys `[num_kv_heads, capacity, head_dim]`
/// @param v quantized values of the same shape (their spec may differ)
/// @param length positions attended
/// @param scale default \f$ 1/\sqrt{d_k} \f$
/// @param splits as `gqa_decode_attention_v2` (0: chosen for this machine)
/// @return `[num_heads, head_dim]`
Tensor2 quantized_kv_decode_attention(const Tensor2& q, const QuantizedKv& k, const QuantizedKv& v, std::size_t length,
                                      std::optional<double> scale = std::nullopt, std::size_t splits = 0);

}  // namespace tvlab::opt
