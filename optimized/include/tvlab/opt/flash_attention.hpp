#pragma once
/// @file
/// Flash attention's forward pass on the CPU (chapter 04). Must match
/// `tvlab::ref::flash_attention_forward`.

#include <string>
#include <vector>

#include "tvlab/core/flash_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// The parts of `FlashConfig::mask` every forward and backward version implements: the
/// structural ones, causal (both alignments) and the sliding window, as a key range per row
/// (`AttentionMask::key_range`) whose tiles outside it are skipped. The boolean mask, the bias and
/// ALiBi are refused (`require_supported`).
inline constexpr MaskSupport kFlashMaskSupport{.causal = true, .top_left = true, .window = true};

/// @ingroup ch04
/// Version 1: the reference's tiled loops in float, reordered for the hardware. Each
/// (head, query tile) is an independent task (OpenMP threads over them); its running maximum,
/// sum and output accumulator live in a per-thread buffer of \f$ B_r (d_v + 2) \f$ floats and the
/// score tile in \f$ B_r B_c \f$ floats, so no `[seq_q, seq_k]` buffer exists anywhere. Dot products
/// and the \f$ \tilde P V \f$ accumulation are contiguous `omp simd` loops. Same contract as the
/// reference (output, log-sum-exp, tile counts), except FP8 emulation (`cfg.fp8`), which only the
/// reference implements: a `tvlab::Error` naming `cfg.fp8`, and the mask parts outside
/// `kFlashMaskSupport`. A query tile visits only the key tiles of `mask.key_range_of_rows`, and
/// in each a row only the columns of its own key range.
FlashOutput flash_attention_forward_v1(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                       const FlashConfig& cfg = {});

/// @ingroup ch04
/// Version 2: v1 with the two tile products as register-blocked SIMD micro-kernels
/// (`detail::score_tile`, `detail::accumulate_pv`: a 4-row x 4-register block of accumulators on
/// AVX-512, 16 FMAs per 4 loads and 4 broadcasts; 4 x 2 on AVX2's 16 registers). Every key tile is packed once per head — K transposed to `[d, B_c]` so the
/// score kernel loads contiguous keys, V to `[B_c, d_v]` — and the online softmax runs on whole
/// vectors (masked and padded columns set to \f$ -\infty \f$, so \f$ e^{S - m'} = 0 \f$ there). Extra memory:
/// the packed copy of K and V, and per thread one score tile and one output tile.
FlashOutput flash_attention_forward_v2(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                       const FlashConfig& cfg = {});

/// @ingroup ch04
/// Version 3: v2's structure with five changes that each remove work the hardware was waiting on.
/// The micro-kernels keep 6 rows x 4 registers of accumulators (24 of AVX-512's 32 registers), so
/// each load of \f$ K^\top \f$ or V feeds 6 FMAs instead of 4. Each key tile is worked in steps
/// whose packed \f$ K^\top \f$ fits half of L1 (128 keys at d = 64, 64 at d = 128). The score
/// kernel keeps each row's maximum on its way out of the registers (no separate max pass). Q is
/// multiplied once by \f$ \text{scale} \cdot \log_2 e \f$, so the weights are
/// \f$ 2^{x - m} \f$ and come from a degree-5 polynomial (`fast_exp2`, relative error below
/// `kFastExp2MaxRelativeError`, 4e-7, where xsimd's exp is within 1.3e-7). The output row is rescaled
/// only when its maximum grows, and l is kept as a register of partial sums. Extra memory: the
/// packed \f$ K^\top \f$ (V is read in place when d_v is a multiple of the micro-kernel width, else
/// copied padded), and per thread a score tile, an output tile and \f$ B_r \f$ rows of the scaled Q.
FlashOutput flash_attention_forward_v3(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                       const FlashConfig& cfg = {});

/// @ingroup ch04
/// The backward pass v1 on the CPU, same contract as `ref::flash_attention_backward`: \f$ P \f$ is
/// recomputed tile by tile from the saved log-sum-exp, in float. Two parallel passes avoid
/// write conflicts without atomics: threads over (head, key tile) accumulate \f$ dK_j, dV_j \f$,
/// then threads over (head, query tile) accumulate \f$ dQ_i \f$, each recomputing every
/// \f$ P_{ij} \f$ and \f$ dS_{ij} \f$ it needs from two `omp simd` dot products (twice the
/// recomputation of a GPU kernel that adds \f$ dQ \f$ atomically). No `[seq_q, seq_k]` buffer; the
/// tile products are not yet micro-kernels, as they are in the forward v2.
FlashGrads flash_attention_backward_v1(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor3& out,
                                       const Tensor2& lse, const Tensor3& dout, const FlashConfig& cfg = {});

/// @ingroup ch04
/// The backward pass v2: v1's two passes with the tile products on the forward v2's
/// micro-kernels — \f$ S = QK^\top \f$ and \f$ dP = dO\,V^\top \f$ from \f$ K^\top \f$ and
/// \f$ V^\top \f$ packed per key tile, \f$ dV \mathrel{+}= P^\top dO \f$,
/// \f$ dK \mathrel{+}= \text{scale}\,dS^\top Q \f$ and \f$ dQ \mathrel{+}= \text{scale}\,dS\,K \f$ on padded copies.
/// Extra memory: packed copies of q, k, v and dout, and per thread a few tiles.
FlashGrads flash_attention_backward_v2(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor3& out,
                                       const Tensor2& lse, const Tensor3& dout, const FlashConfig& cfg = {});

/// @ingroup ch04
/// The backward pass v3: one pass, as FlashAttention-2's
/// Algorithm 2. Threads share each head's key tiles; a thread forms \f$ P \f$ and \f$ dS \f$ of
/// its tile against every query tile once and adds \f$ dV_j, dK_j \f$ and its share of \f$ dQ \f$
/// (into a private `[seq_q, d]` buffer instead of a GPU's atomic adds); the buffers are summed
/// per head. Five tile products per (query tile, key tile) pair instead of v2's seven. Extra
/// memory: v2's, plus `threads x seq_q x d_pad` floats (d rounded up to a micro-kernel width).
FlashGrads flash_attention_backward_v3(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor3& out,
                                       const Tensor2& lse, const Tensor3& dout, const FlashConfig& cfg = {});

/// @ingroup ch04
/// The backward pass v4: threads over heads, as ATen's CPU kernel, so that each head's
/// \f$ dQ, dK, dV \f$ accumulate in place (no per-thread \f$ dQ \f$ buffers to sum, no barrier per
/// head). The tile pair is v3's five products on the forward v3's 6-row micro-kernels; \f$ P \f$
/// and \f$ dS \f$ are computed on whole registers, \f$ P = 2^{S \log_2 e - L \log_2 e} \f$ by
/// `fast_exp2` (v3 calls `std::exp` one score at a time); \f$ dV \mathrel{+}= P^\top dO \f$ and
/// \f$ dK \mathrel{+}= \text{scale}\, dS^\top Q \f$ read the tiles of P and dS column-wise instead of
/// transposed copies. Its tiles are `cfg`'s, shrunk where needed so that one `[rows, d]` operand
/// fills at most half of L1 (64 rows at d = 128; never below 64 rows, so above d = 128 more). Extra memory: v2's, plus per thread one head's
/// \f$ dQ \f$ (`seq_q x d_pad`).
FlashGrads flash_attention_backward_v4(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor3& out,
                                       const Tensor2& lse, const Tensor3& dout, const FlashConfig& cfg = {});

/// @ingroup ch04
/// The backward pass: v4 when the heads split evenly over the threads; else v3 when each thread
/// gets at least two key tiles of a head, else v2 (whose tasks span all heads).
FlashGrads flash_attention_backward(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor3& out,
                                    const Tensor2& lse, const Tensor3& dout, const FlashConfig& cfg = {});

/// One entry of the chapter's variant table: tests and benchmarks iterate over it in order.
struct FlashVariant {
  std::string name;    ///< "v1", ...
  std::string change;  ///< the one improvement over the previous version
  FlashOutput (*function)(const Tensor3&, const Tensor3&, const Tensor3&, const FlashConfig&);
};

/// @ingroup ch04
/// v1, ... in the order the lesson walks them; the last one is the headline version.
const std::vector<FlashVariant>& flash_variants();

/// @ingroup ch04
/// The headline version (the last of `flash_variants()`).
FlashOutput flash_attention_forward(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg = {});

}  // namespace tvlab::opt
