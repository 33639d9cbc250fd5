#pragma once
/// @file
/// Chapter 05's backend registry (see `chapters/common/backend.hpp`): every implementation of the
/// decode step of attention over a KV cache (contiguous, paged, and MLA's absorbed form), with what
/// it needs.

#include <cstddef>
#include <functional>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "../common/backend.hpp"
#include "tvlab/core/paged_kv_cache.hpp"
#include "tvlab/core/tensor.hpp"
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

struct Backend {
  std::string name;
  BackendKind kind = BackendKind::reference;
  Capabilities caps;
  DecodeFn decode;              ///< the decode step over a contiguous cache (empty: not provided)
  PagedDecodeFn paged_decode;   ///< the decode step over a paged cache (empty: not provided)
  MlaDecodeFn mla_decode;       ///< MLA's absorbed decode step (empty: not provided)
};

/// ref, opt and cuda (which needs a device: its cases skip without one).
const std::vector<Backend>& backends();

/// gtest prints a parameter through PrintTo: the backend's name, not its bytes.
inline void PrintTo(const Backend& b, std::ostream* out) { *out << b.name; }

}  // namespace tvlab::kv
