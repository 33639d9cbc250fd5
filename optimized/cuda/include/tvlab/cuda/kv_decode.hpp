#pragma once
/// @file
/// Chapter 05's decode step on a CUDA device, host tensors in and out: split-K flash-decoding
/// (FlashDecoding, Dao et al., 2023; the two kernels of vLLM's PagedAttention v2) over a contiguous
/// cache (GQA, MQA, MHA), over a paged cache through a block table, and over MLA's absorbed cache.
/// Same names, signatures, checks and error messages as `tvlab/ref/gqa_decode.hpp`,
/// `tvlab/ref/paged_attention.hpp` and `tvlab/ref/mla_decode.hpp`; the device-pointer entry point is
/// in `tvlab/cuda/kv_decode_device.hpp`.
///
/// All three run one kernel. Its grid is (split of the positions, kv head, chunk of at most 16 of
/// the kv head's query heads); a thread block stages its positions' keys and values in shared
/// memory 32 at a time, each once for all the query heads it serves, and keeps per query head the
/// online-softmax state \f$ (m_s, \ell_s, \tilde o_s) \f$ of its split, in float. A second kernel,
/// one thread block per query head, merges the splits:
/// \f[ m = \max_s m_s,\quad \ell = \sum_s e^{m_s - m} \ell_s,\quad
///     o = \frac{\sum_s e^{m_s - m}\, \tilde o_s}{\ell},\quad L = m + \ln \ell. \f]
/// @ingroup ch05

#include <cstddef>
#include <optional>
#include <span>

#include "tvlab/core/paged_kv_cache.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/gqa_decode.hpp"
#include "tvlab/ref/mla_decode.hpp"

namespace tvlab::cuda {

using ref::GqaDecodeOutput;
using ref::MlaDecodeAttention;

/// @ingroup ch05
/// See `ref::gqa_decode_attention`: q `[h, d]`, k_cache `[g, capacity, d]`, v_cache
/// `[g, capacity, d_v]`, the first `length` positions attended; returns out `[h, d_v]` and lse `[h]`.
/// The split count is chosen for the shape: about 528 thread blocks in all (four per
/// multiprocessor of an H100 / H200), no split shorter than one tile of 32 positions. Same checks
/// (`ref::validate_gqa_decode`); the whole caches are copied to the device, the positions past
/// `length` are never read.
GqaDecodeOutput gqa_decode_attention(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                     std::size_t length, std::optional<double> scale = std::nullopt);

/// @ingroup ch05
/// `gqa_decode_attention` with the positions cut into at most `splits` ranges of
/// \f$ \lceil \text{length} / \text{splits} \rceil \f$ positions (the last shorter; a count that
/// would leave a range empty gives fewer ranges). Any count gives the same result up to float
/// rounding. Throws `tvlab::Error` naming `splits` when it is 0.
GqaDecodeOutput gqa_decode_attention_split_k(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                             std::size_t length, std::optional<double> scale, std::size_t splits);

/// @ingroup ch05
/// See `ref::paged_decode_attention` (the block-table form): q `[num_heads, head_dim]`, the first
/// `context_len` tokens that `block_table` maps in `cache`; returns out `[num_heads, head_dim]` and lse
/// `[num_heads]`, as `ref::paged_decode_attention_with_lse`. The
/// kernel of `gqa_decode_attention`, finding the row of token t in block `block_table[t / b]`,
/// slot t mod b. The cache's two pools and the table's first \f$ \lceil n / b \rceil \f$ entries are
/// copied to the device. Same checks as the reference (the table through
/// `PagedKvCache::validate_block_table`), and the scale must also be representable in float. Only
/// fp32 pools: a cache in bf16, INT8 or FP8 storage is a `tvlab::Error` naming `cache`.
GqaDecodeOutput paged_decode_attention_with_lse(const Tensor2& q, const PagedKvCache& cache,
                                                std::span<const std::size_t> block_table, std::size_t context_len,
                                                std::optional<double> scale = {});

/// @ingroup ch05
/// The outputs of `paged_decode_attention_with_lse` alone, `[num_heads, head_dim]`, as
/// `ref::paged_decode_attention` returns them.
Tensor2 paged_decode_attention(const Tensor2& q, const PagedKvCache& cache, std::span<const std::size_t> block_table,
                               std::size_t context_len, std::optional<double> scale = {});

/// @ingroup ch05
/// `paged_decode_attention_with_lse` with at most `splits` ranges of positions, as
/// `gqa_decode_attention_split_k`.
GqaDecodeOutput paged_decode_attention_split_k(const Tensor2& q, const PagedKvCache& cache,
                                       std::span<const std::size_t> block_table, std::size_t context_len,
                                       std::optional<double> scale, std::size_t splits);

/// @ingroup ch05
/// See `ref::mla_absorbed_decode_attention`: q_absorbed `[n_h, d_c + d_h^R]` against the first
/// `length` rows of latents `[capacity, d_c]` and rope_keys `[capacity, d_h^R]`; returns out_latent
/// `[n_h, d_c]` and lse `[n_h]`. The kernel of `gqa_decode_attention` with one kv head whose key
/// rows are \f$ [c^{KV}_j; k^R_j] \f$ (the host lays the two side by side, \f$ d_c + d_h^R \f$ floats
/// per position, as FlashMLA's cache does) and whose values are the first \f$ d_c \f$ columns of the
/// same rows, read from the staged key tile: all \f$ n_h \f$ heads form one group. The query
/// absorption \f$ \tilde q_i = W^{UK\top}_i q^C_i \f$ before it and \f$ W^{UV}, W^O \f$ after it are
/// not part of this step, as in the reference. Same checks
/// (`ref::validate_mla_decode_attention`, `ref::check_mla_decode_cache`).
MlaDecodeAttention mla_absorbed_decode_attention(const Tensor2& q_absorbed, const Tensor2& latents,
                                                 const Tensor2& rope_keys, std::size_t length, double scale);

/// @ingroup ch05
/// `mla_absorbed_decode_attention` with at most `splits` ranges of positions, as
/// `gqa_decode_attention_split_k`.
MlaDecodeAttention mla_absorbed_decode_attention_split_k(const Tensor2& q_absorbed, const Tensor2& latents,
                                                         const Tensor2& rope_keys, std::size_t length, double scale,
                                                         std::size_t splits);

}  // namespace tvlab::cuda
