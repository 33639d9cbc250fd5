#pragma once
/// @file
/// Chapter 05, the reference of decode attention over a quantized KV cache: the keys and values
/// are read as codes and scales (`tvlab/core/kv_quant.hpp`) and dequantized element by element
/// inside the loops, as a kernel that reads an INT8, INT4 or FP8 cache does; nothing is
/// dequantized into a float cache first.
///
/// What quantization costs the output can be bounded from what is stored. With
/// \f$ |k_{tc} - \hat k_{tc}| \le \delta^K_{tc} \f$ and \f$ |v_{tc} - \hat v_{tc}| \le \delta^V_{tc} \f$ (half a
/// step), every score moves by at most \f$ \varepsilon = \text{scale}\,\max_t \sum_c |q_c|\,\delta^K_{tc} \f$,
/// so every weight by a factor within \f$ [e^{-2\varepsilon}, e^{2\varepsilon}] \f$ and the weights' total
/// variation \f$ \tfrac12 \|\hat p - p\|_1 \le 1 - e^{-2\varepsilon} \f$. Writing
/// \f$ \hat o - o = \sum_t \hat p_t (\hat v_t - v_t) + \sum_t (\hat p_t - p_t) v_t \f$:
/// \f[ |\hat o_c - o_c| \le \max_t \delta^V_{tc}
///     + (1 - e^{-2\varepsilon})\,\big(\max_t v_{tc} - \min_t v_{tc}\big), \f]
/// because a difference of two weightings of equal total mass \f$ \tau \f$ moves a sum by at most
/// \f$ \tau \f$ times the range of what is summed. The range of the true values is at most the range
/// of the dequantized ones plus \f$ 2 \max_t \delta^V_{tc} \f$.
/// @ingroup ch05

#include <optional>

#include "tvlab/core/kv_quant.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch05
/// One decode step of grouped-query attention over quantized keys and values:
/// \f[ o_i = \sum_{t} \mathrm{softmax}_t\!\big(\text{scale}\; q_i \cdot \hat k_{g(i), t}\big)\, \hat v_{g(i), t},
///     \qquad g(i) = \lfloor i / (h / g) \rfloor, \f]
/// with \f$ \hat k, \hat v \f$ dequantized from `k` and `v` (`QuantizedKv::dequantized`) as they are
/// read, and accumulated in double.
/// @param q `[num_heads, head_dim]`, num_heads a multiple of k's heads
/// @param k quantized keys `[num_kv_heads, seq, head_dim]`
/// @param v quantized values of the same shape (their format may differ: KIVI quantizes keys per
///          channel and values per token)
/// @param scale default \f$ 1/\sqrt{d_k} \f$
/// @return `[num_heads, head_dim]`
Tensor2 quantized_kv_decode_attention(const Tensor2& q, const QuantizedKv& k, const QuantizedKv& v,
                                      std::optional<double> scale = {});

/// @ingroup ch05
/// The bound of this file's comment for every output element of `quantized_kv_decode_attention`
/// against attention over the unquantized keys and values (in exact arithmetic):
/// \f$ \max_t \delta^V_{tc} + (1 - e^{-2\varepsilon_i})
///     (\max_t \hat v_{tc} - \min_t \hat v_{tc} + 2\max_t \delta^V_{tc}) \f$,
/// \f$ \varepsilon_i = \text{scale}\,\max_t \sum_c |q_{ic}|\,\delta^K_{g(i),tc} \f$, computed from the codes and
/// scales alone. Same parameters and checks as `quantized_kv_decode_attention`.
/// @param q `[num_heads, head_dim]`
/// @param k quantized keys
/// @param v quantized values
/// @param scale default \f$ 1/\sqrt{d_k} \f$
/// @return `[num_heads, head_dim]`
Tensor2 quantized_kv_attention_error_bound(const Tensor2& q, const QuantizedKv& k, const QuantizedKv& v,
                                           std::optional<double> scale = {});

}  // namespace tvlab::ref
