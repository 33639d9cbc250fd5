#pragma once
/// @file
/// The one specification of which keys each query may attend to and what is added to its
/// scores, taken by every attention backend (chapters 00, 02 and 04): a causal rule with an
/// explicit alignment, a sliding window, a boolean mask, an additive bias, and ALiBi's slopes.
/// The member functions of `AttentionMask` are its reference meaning; a backend either computes
/// exactly that or refuses the part it lacks through `require_supported`.

#include <cstddef>
#include <optional>
#include <string>

#include "tvlab/core/tensor.hpp"

namespace tvlab {

/// Where query row \f$ i \f$ of \f$ n_q \f$ sits among the \f$ n_k \f$ key positions, for the
/// parts of a mask that compare positions (causal, the sliding window, ALiBi):
/// - `top_left`: \f$ i' = i \f$. PyTorch's `scaled_dot_product_attention(is_causal=True)` builds
///   `torch.ones(L, S).tril(diagonal=0)`, aligned to the upper-left corner
///   (`torch.nn.attention.bias.causal_upper_left`): with \f$ n_q < n_k \f$ the last keys are
///   hidden from every query.
/// - `bottom_right`: \f$ i' = i + (n_k - n_q) \f$: the queries are the last \f$ n_q \f$ of the
///   \f$ n_k \f$ positions, as with a KV cache. FlashAttention's `causal=True` since version 2.1 ("the causal
///   mask is aligned to the bottom right corner of the attention matrix", `flash_attn_func`;
///   2.0 aligned it top-left), its
///   `window_size` and `alibi_slopes`, and PyTorch's `causal_lower_right`.
///
/// With \f$ n_q = n_k \f$ the two agree.
enum class CausalAlign { top_left, bottom_right };

/// A sliding window (local attention, as Longformer, Mistral and FlashAttention's
/// `window_size = (left, right)`): query \f$ i \f$ sees key \f$ j \f$ only when
/// \f$ i' - w_l \le j \le i' + w_r \f$, \f$ i' \f$ as `CausalAlign` defines it. A causal sliding
/// window of \f$ w \f$ keys (the query's own and the \f$ w - 1 \f$ before it) is `causal` with
/// `{w - 1, 0}`. Widths at least the sequence length do not limit anything.
struct SlidingWindow {
  long long left = 0;   ///< \f$ w_l \ge 0 \f$: how many keys before position \f$ i' \f$ remain visible
  long long right = 0;  ///< \f$ w_r \ge 0 \f$: how many keys after it (irrelevant with `causal`)
};

/// A half-open range of indices [begin, end); empty when begin == end.
struct IndexRange {
  std::size_t begin = 0, end = 0;
  bool empty() const { return end <= begin; }
  std::size_t size() const { return empty() ? 0 : end - begin; }
  bool operator==(const IndexRange&) const = default;
};

/// Which keys each query may attend to, and what is added to its scores. The scores of
/// attention are
/// \f[ S_{hij} = \text{scale}\cdot q_{hi} \cdot k_{hj} + b_{ij} - m_h\,|i' - j|
///     \quad\text{where } \mathrm{allows}(i, j), \qquad S_{hij} = -\infty \text{ elsewhere}, \f]
/// with \f$ b \f$ = `bias` and \f$ m_h \f$ = `alibi_slopes` (each 0 when absent) and \f$ i' \f$ the
/// query's position (`causal_align`). A query that may see no key (every entry \f$ -\infty \f$)
/// has output 0, as in FlashAttention, never NaN. All parts are optional and combine: a key is
/// visible when every part present allows it.
struct AttentionMask {
  bool causal = false;  ///< query \f$ i \f$ sees keys \f$ j \le i' \f$ only
  /// How \f$ i' \f$ is placed; it matters to `causal`, `window` and `alibi_slopes` when \f$ n_q \ne n_k \f$.
  CausalAlign causal_align = CausalAlign::bottom_right;
  std::optional<SlidingWindow> window;  ///< keys \f$ i' - w_l \le j \le i' + w_r \f$ only
  std::optional<Mask2> allowed;         ///< `[seq_q, seq_k]`, true = may attend (every head)
  /// `[seq_q, seq_k]` \f$ b_{ij} \f$, added to the scaled scores (every head); \f$ -\infty \f$ forbids.
  std::optional<Tensor2> bias;
  /// Chapter 02, ALiBi (Press et al., 2022): `[heads]` slopes \f$ m_h \ge 0 \f$; adds
  /// \f$ -m_h\,|i' - j| \f$ to the scaled scores (FlashAttention's `alibi_slopes` with the
  /// bottom-right alignment).
  std::optional<DTensor1> alibi_slopes;

  /// True when nothing is masked or added: plain attention.
  bool is_none() const { return !causal && !window && !allowed && !bias && !alibi_slopes; }

  /// True when a part compares positions (causal, window, ALiBi), so `causal_align` matters.
  bool uses_positions() const { return causal || window.has_value() || alibi_slopes.has_value(); }

  /// \f$ i' \f$: \f$ i \f$ (top_left) or \f$ i + n_k - n_q \f$ (bottom_right).
  long long query_position(std::size_t i, std::size_t seq_q, std::size_t seq_k) const;

  /// Whether query \f$ i \f$ may attend to key \f$ j \f$: \f$ j \le i' \f$ with `causal`,
  /// \f$ i' - w_l \le j \le i' + w_r \f$ with `window`, and `allowed(i, j)` with a boolean mask.
  /// (A bias of \f$ -\infty \f$ hides a key too; that is `score_bias`'s part.)
  bool allows(std::size_t i, std::size_t j, std::size_t seq_q, std::size_t seq_k) const;

  /// What is added to the scaled score of query \f$ i \f$ and key \f$ j \f$ in head \f$ h \f$:
  /// \f$ b_{ij} - m_h\,|i' - j| \f$ (each term 0 when absent; \f$ -\infty \f$ where the bias forbids).
  double score_bias(std::size_t h, std::size_t i, std::size_t j, std::size_t seq_q, std::size_t seq_k) const;

  /// The contiguous range of keys the structural parts (causal, window) leave to query \f$ i \f$:
  /// \f$ [\max(0, i' - w_l),\ \min(n_k, i' + w_r + 1)) \f$, the upper end at most \f$ i' + 1 \f$ with
  /// `causal` (the whole \f$ [0, n_k) \f$ without either). Every key outside it is forbidden, so a
  /// loop may skip to it; the boolean mask and \f$ -\infty \f$ biases may hide keys inside it.
  /// Both ends never decrease as \f$ i \f$ grows.
  IndexRange key_range(std::size_t i, std::size_t seq_q, std::size_t seq_k) const;

  /// The union of `key_range(i)` over the query rows \f$ i \in [\text{first}, \text{last}) \f$ (a
  /// query tile): \f$ [\max(0, i'_\text{first} - w_l),\ \min(n_k, i'_{\text{last}-1} + w_r + 1)) \f$
  /// (with the same causal bound), since the ranges of consecutive rows overlap or touch. A key
  /// tile outside it is hidden from the whole query tile and may be skipped.
  IndexRange key_range_of_rows(std::size_t first, std::size_t last, std::size_t seq_q, std::size_t seq_k) const;

  /// The queries whose `key_range` contains key \f$ j \f$: those with
  /// \f$ j - w_r \le i' \le j + w_l \f$ (and \f$ i' \ge j \f$ with `causal`), a contiguous range;
  /// what a backward pass that loops over keys visits.
  IndexRange query_range(std::size_t j, std::size_t seq_q, std::size_t seq_k) const;

  /// The union of `query_range(j)` over the keys \f$ j \in [\text{first}, \text{last}) \f$ (a key
  /// tile): the queries a backward pass that loops over key tiles must visit.
  IndexRange query_range_of_keys(std::size_t first, std::size_t last, std::size_t seq_q, std::size_t seq_k) const;
};

/// Checks `mask` for `heads` heads and sequences of seq_q queries and seq_k keys, throwing
/// `tvlab::Error` that names `function` and the field (`mask.allowed`, `mask.bias`,
/// `mask.alibi_slopes`, `mask.window.left`, `mask.window.right`, `mask.causal_align`):
/// - `allowed` and `bias` must be `[seq_q, seq_k]`; `bias` holds finite values or \f$ -\infty \f$
///   (NaN and \f$ +\infty \f$ define no softmax);
/// - `alibi_slopes` has one finite slope \f$ \ge 0 \f$ per head;
/// - window widths are \f$ \ge 0 \f$ (a query always may see its own position's key);
/// - the bottom-right alignment places the queries at the last seq_q of the seq_k key positions, so
///   with a part that uses positions (causal, window, ALiBi) it needs seq_q <= seq_k; use
///   `top_left` otherwise.
///
/// Masks that hide every key of a row are valid (that row's output is 0).
void validate_attention_mask(const char* function, std::size_t heads, std::size_t seq_q, std::size_t seq_k,
                             const AttentionMask& mask);

/// The parts of an `AttentionMask` a backend implements, exported by each backend next to its
/// functions (`opt::kAttentionMaskSupport`, `cuda::kFlashMaskSupport`, ...).
struct MaskSupport {
  bool causal = false;    ///< `causal`
  bool top_left = false;  ///< `causal_align = top_left` for the parts that use positions (else bottom_right only)
  bool window = false;    ///< `window`
  bool allowed = false;   ///< the boolean mask `allowed`
  bool bias = false;      ///< the additive `bias`
  bool alibi = false;     ///< `alibi_slopes`
};

/// Every part: what the reference implements.
inline constexpr MaskSupport kFullMaskSupport{
    .causal = true, .top_left = true, .window = true, .allowed = true, .bias = true, .alibi = true};

/// "causal, causal_align = top_left, window, ..." (the parts supported), or "no mask".
std::string to_string(const MaskSupport& supported);

/// Throws `tvlab::Error` naming `function` and the first part of `mask` that `supported` lacks
/// ("mask.window", "mask.causal_align = top_left", "mask.allowed", "mask.bias",
/// "mask.alibi_slopes", "mask.causal"), and what the backend supports. The alignment counts only
/// when a part uses positions.
void require_supported(const char* function, const AttentionMask& mask, const MaskSupport& supported);

}  // namespace tvlab
