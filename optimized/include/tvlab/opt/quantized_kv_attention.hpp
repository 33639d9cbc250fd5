#pragma once
/// @file
/// One decode step over a quantized KV cache on the CPU (chapter 05): INT8, INT4 and FP8 E4M3 codes
/// with their scales (`tvlab/core/kv_quant.hpp`). Must match `tvlab::ref::quantized_kv_decode_attention`.
/// (The bf16 cache, whose conversion is a shift, has its own step: `tvlab/opt/bf16_kv_decode.hpp`.)
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
/// INT8 and FP8 E4M3 per token (one scale \f$ s_t \f$ per token and kv head, head_dim a whole
/// number of SIMD registers) skip the buffer: the scale comes out of both products,
/// \f$ q \cdot \hat k_t = s_t\,(q \cdot c_t) \f$ and \f$ \sum_t p_t \hat v_t = \sum_t (p_t s_t)\,c_t \f$
/// with \f$ c_t \f$ the codes as numbers, so the kernels convert each register of codes in
/// registers and use it for four query rows (`optimized/src/detail/code_kernels.hpp`). Writing
/// and reading back the buffer cost more than the 4x fewer bytes saved; without it these two
/// formats decode in about half (INT8) and two thirds (FP8) of the float cache's time.
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

#include "tvlab/core/kv_quant.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// @ingroup ch05
/// The decode step over quantized keys and values, attending to their first `length` positions
/// (the quantized tensors' `seq` is then the cache's capacity) with the positions cut into
/// `splits` ranges, as `gqa_decode_attention_v2` cuts them (0: chosen for this machine):
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
/// @param scale \f$ 1/\sqrt{d_k} \f$ when absent
/// @param splits ranges of positions (0: chosen for this machine)
/// @return `[num_heads, head_dim]`
Tensor2 quantized_kv_decode_attention_split_k(const Tensor2& q, const QuantizedKv& k, const QuantizedKv& v,
                                              std::size_t length, std::optional<double> scale, std::size_t splits);

/// @ingroup ch05
/// The decode step over every position of quantized keys and values:
/// `quantized_kv_decode_attention_split_k` with `length = k.seq` and the splits chosen for this
/// machine. Same arguments, result (up to float rounding) and errors as
/// `ref::quantized_kv_decode_attention`.
/// @param q `[num_heads, head_dim]`, num_heads a multiple of k's heads
/// @param k quantized keys `[num_kv_heads, seq, head_dim]`
/// @param v quantized values of the same shape (their spec may differ)
/// @param scale default \f$ 1/\sqrt{d_k} \f$
/// @return `[num_heads, head_dim]`
Tensor2 quantized_kv_decode_attention(const Tensor2& q, const QuantizedKv& k, const QuantizedKv& v,
                                      std::optional<double> scale = {});

}  // namespace tvlab::opt
