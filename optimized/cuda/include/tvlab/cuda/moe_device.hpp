#pragma once
/// @file
/// Device-pointer entry points of chapter 09's CUDA kernels (moe.cu); no xtensor here. Indices are
/// 32-bit on the device.

#include <cstddef>
#include <cstdint>

namespace tvlab::cuda::device {

/// out[i, :] = x[token[i], :] for i < rows: the tokens' rows gathered in expert order.
void gather_rows(const float* x, const std::int32_t* token, std::size_t rows, std::size_t d_model, float* out);

/// y[t, :] = sum over i in [token_first[t], token_first[t + 1]) of gate[i] * rows[row[i], :]: each
/// token's expert outputs, in the routing's order, weighted. One block per token.
void combine_rows(const float* rows, const std::int32_t* token_first, const std::int32_t* row, const float* gate,
                  std::size_t tokens, std::size_t d_model, float* y);

/// The top-k router, one warp per token (the experts spread over its lanes), in double (ref::route_top_k's steps): clip and
/// temperature, softmax (`sigmoid` false) or sigmoid scores, the selection scores s + b (`bias` may
/// be null), group-limited selection when n_group > 1, the k best by repeated maxima (ties: the lower
/// index), gates renormalised when `normalize`, times `scale`. Writes expert[t * k + j], gate[t * k + j].
/// At most 1024 experts and 64 groups.
void route_top_k(const float* logits, std::size_t tokens, std::size_t num_experts, std::size_t k, bool sigmoid, bool normalize,
                 float temperature, float logit_clip, std::size_t n_group, std::size_t topk_group, float scale, const float* bias,
                 std::int32_t* expert, float* gate);

}  // namespace tvlab::cuda::device
