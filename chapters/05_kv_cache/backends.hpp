#pragma once
/// @file
/// Chapter 05's backend registry (see `chapters/common/backend.hpp`): every implementation of the
/// decode step of attention over a KV cache (contiguous, paged, MLA's absorbed form, a bf16 cache, a
/// quantized cache, a cache laid out per token), of the grouped attention of a prefill, and of the
/// MLA and TPA layers over their caches, with what it needs.

#include <cstddef>
#include <functional>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "../common/backend.hpp"
#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/kv_bf16.hpp"
#include "tvlab/core/kv_quant.hpp"
#include "tvlab/core/mla_config.hpp"
#include "tvlab/core/paged_kv_cache.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/core/tpa_config.hpp"
#include "tvlab/ref/gqa_decode.hpp"
#include "tvlab/ref/mla_decode.hpp"

namespace tvlab::kv {

/// What one decode step of attention returns for the new token: each query head's output `[h, d_v]`
/// and the log of its softmax denominator, \f$ \mathrm{lse}_t = \log \sum_{p < n} e^{s_{tp}} \f$
/// `[h]` (with it, attention over two parts of the cache can be merged, as chapter 04's online
/// softmax does).
using DecodeAttention = ref::GqaDecodeOutput;

/// The decode step over a contiguous cache: the new token's queries `q` `[h, d]` attend over the
/// first `length` positions of `k_cache` `[g, capacity, d]` and `v_cache` `[g, capacity, d_v]`;
/// query head \f$ t \f$ reads kv head \f$ \lfloor t / (h/g) \rfloor \f$. `scale`: \f$ 1/\sqrt{d} \f$
/// when absent. Positions from `length` to `capacity` are free slots and must not be read.
/// (`ref::gqa_decode_attention`'s contract.)
using DecodeFn = std::function<DecodeAttention(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                               std::size_t length, std::optional<double> scale)>;

/// The same step over a paged cache: `q` `[h, d]` over the first `context_len` tokens that
/// `block_table` maps in `cache` (token \f$ t \f$ in slot \f$ t \bmod b \f$ of block
/// \f$ T[t / b] \f$); the table is checked against the cache. Returns out `[h, d]` and lse `[h]`.
/// (`ref::paged_decode_attention_with_lse`'s contract.)
using PagedDecodeFn = std::function<DecodeAttention(const Tensor2& q, const PagedKvCache& cache,
                                                    std::span<const std::size_t> block_table,
                                                    std::size_t context_len, std::optional<double> scale)>;

/// MLA's absorbed decode step: the absorbed queries `q_absorbed` `[n_h, d_c + d_h^R]` over the
/// first `length` rows of the latent cache `latents` `[capacity, d_c]` and the shared RoPE keys
/// `rope_keys` `[capacity, d_h^R]`. Returns each head's attention-weighted latent `[n_h, d_c]` and
/// lse `[n_h]`. (`ref::mla_absorbed_decode_attention`'s contract.)
using MlaDecodeFn = std::function<ref::MlaDecodeAttention(const Tensor2& q_absorbed, const Tensor2& latents,
                                                          const Tensor2& rope_keys, std::size_t length, double scale)>;

/// The decode step over a bf16 cache (`Bf16Kv`, the top 16 bits of each float): `q` `[h, d]` over
/// the first `length` positions of `k_cache` `[g, capacity, d]` and `v_cache` `[g, capacity, d_v]`,
/// each value read back exactly. Returns out `[h, d_v]` and lse `[h]`.
/// (`ref::bf16_kv_decode_attention`'s contract.)
using Bf16DecodeFn = std::function<DecodeAttention(const Tensor2& q, const Bf16Kv& k_cache, const Bf16Kv& v_cache,
                                                   std::size_t length, std::optional<double> scale)>;

/// The decode step over quantized keys and values (`QuantizedKv`: INT8, INT4 or FP8 codes with
/// their scales): `q` `[h, d]` over every position of `k` and `v` `[g, seq, d]`, each code
/// dequantized as it is read. Returns out `[h, d]`. (`ref::quantized_kv_decode_attention`'s contract.)
using QuantizedDecodeFn = std::function<Tensor2(const Tensor2& q, const QuantizedKv& k, const QuantizedKv& v,
                                                std::optional<double> scale)>;

/// Grouped scaled dot-product attention, the attention of a prefill: `q` `[h, seq_q, d]` over `k`
/// `[g, seq_k, d]` and `v` `[g, seq_k, d_v]`, query head \f$ t \f$ reading kv head
/// \f$ \lfloor t / (h/g) \rfloor \f$, with the scale and the mask of `cfg` (the mask's parts that
/// `Capabilities::masks` lists; the others are refused by name). Returns `[h, seq_q, d_v]`.
/// (`ref::grouped_scaled_dot_product_attention`'s contract.)
using GqaAttentionFn =
    std::function<Tensor3(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionConfig& cfg)>;

/// The decode step over a float cache laid out per token: `k_cache` `[capacity, g, d]` and
/// `v_cache` `[capacity, g, d_v]` (the g heads of a position together), otherwise `DecodeFn`'s
/// contract. (`opt::gqa_decode_attention_per_token`'s.)
using PerTokenDecodeFn = DecodeFn;

/// One MLA layer over its cache: `x` `[n, hidden_size]` at positions `cache.tokens()` onwards,
/// appending to `cache` (one of its path), returning `[n, hidden_size]`. (`ref::mla_naive`'s and
/// `ref::mla_absorbed`'s contract.)
using MlaLayerFn = std::function<Tensor2(const Tensor2& x, const MlaWeights& w, const MlaConfig& cfg, MlaCache& cache)>;

/// One TPA layer over its cache of factors, as `MlaLayerFn`. (`ref::tensor_product_attention`'s contract.)
using TpaLayerFn = std::function<Tensor2(const Tensor2& x, const TpaWeights& w, const TpaConfig& cfg, TpaCache& cache)>;

struct Backend {
  std::string name;
  BackendKind kind = BackendKind::reference;
  Capabilities caps;
  DecodeFn decode;              ///< the decode step over a contiguous cache (empty: not provided)
  PagedDecodeFn paged_decode;   ///< the decode step over a paged cache (empty: not provided)
  MlaDecodeFn mla_decode;       ///< MLA's absorbed decode step (empty: not provided)
  Bf16DecodeFn bf16_decode;     ///< the decode step over a bf16 cache (empty: not provided)
  QuantizedDecodeFn quantized_decode;  ///< the decode step over a quantized cache (empty: not provided)
  PerTokenDecodeFn per_token_decode;   ///< the decode step over a cache laid out per token (empty: not provided)
  GqaAttentionFn gqa_attention;        ///< grouped attention over whole sequences, a prefill's (empty: not provided)
  MlaLayerFn mla_naive;                ///< MLA's layer with expanded keys and values cached (empty: not provided)
  MlaLayerFn mla_absorbed;             ///< MLA's layer with the latents cached, absorbed (empty: not provided)
  TpaLayerFn tpa;                      ///< TPA's layer over its cache of factors (empty: not provided)
};

/// ref, opt, every numbered version of opt's decode steps, cuda (which needs a device: its cases
/// skip without one), student.
const std::vector<Backend>& backends();

/// gtest prints a parameter through PrintTo: the backend's name, not its bytes.
inline void PrintTo(const Backend& b, std::ostream* out) { *out << b.name; }

}  // namespace tvlab::kv
