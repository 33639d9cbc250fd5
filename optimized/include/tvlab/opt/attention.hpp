#pragma once
/// @file
/// Scaled dot-product and multi-head attention on OpenBLAS SGEMM (chapter 00).
/// Must match `tvlab::ref::scaled_dot_product_attention` and `ref::multi_head_attention`.

#include <string>
#include <vector>

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// The parts of `AttentionConfig::mask` every version implements: all of them (the causal rule
/// and the window as a key range per row, the bias and ALiBi added in float, the boolean mask).
inline constexpr MaskSupport kAttentionMaskSupport = kFullMaskSupport;

/// @ingroup ch00
/// Version 1: the reference's loops in float, reordered for the hardware. Scores are float dot
/// products (`omp simd`), the softmax is `softmax_row_inplace`, and \f$ O_i = \sum_j P_{ij} V_j \f$
/// is accumulated row by row (an axpy over contiguous memory that vectorises), with threads over
/// (head, query) rows. No n x n buffer: one `seq_k` row per thread. The mask is applied per
/// score (`AttentionMask::allows`, then the bias and ALiBi's \f$ -m_h|i' - j| \f$ in float).
/// Same contract as the reference.
Tensor3 scaled_dot_product_attention_v1(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                        const AttentionConfig& cfg = {});

/// @ingroup ch00
/// Version 2: both products as OpenBLAS SGEMMs (cache blocking and FMA micro-kernels that plain
/// loops cannot match), the softmax in place on the score matrix, threads over heads. The mask is
/// one pass over each score row: -inf outside `AttentionMask::key_range` (causal, window), the
/// bias and ALiBi added inside it, then the boolean mask. This is what
/// `scaled_dot_product_attention` runs.
Tensor3 scaled_dot_product_attention_v2(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                        const AttentionConfig& cfg = {});

/// One entry of the chapter's variant table: tests and benchmarks iterate over it in order.
struct AttentionVariant {
  std::string name;    ///< "v1", "v2"
  std::string change;  ///< the one improvement over the previous version
  bool full_score_matrix;  ///< whether it stores a whole [seq_q, seq_k] score matrix per thread
  Tensor3 (*function)(const Tensor3&, const Tensor3&, const Tensor3&, const AttentionConfig&);
};

/// @ingroup ch00
/// v1, v2, ... in the order the lesson walks them; the last one is the headline version.
const std::vector<AttentionVariant>& attention_variants();

/// @ingroup ch00
/// The best version (`scaled_dot_product_attention_v2`). Per head: \f$ S = \text{scale}\cdot QK^\top \f$ as one SGEMM, the mask applied in place,
/// `softmax_row_inplace` on every row, then \f$ O = PV \f$ as a second SGEMM. Heads run in
/// parallel (OpenMP, at most one thread per head), each thread with a private `[seq_q, seq_k]`
/// score buffer. Same shapes as the reference.
Tensor3 scaled_dot_product_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                     const AttentionConfig& cfg = {});

/// @ingroup ch00
/// The projections \f$ XW_q, XW_k, XW_v \f$ and \f$ \mathrm{Concat}(\cdot)W_o \f$ as four SGEMMs
/// around `opt::scaled_dot_product_attention`.
Tensor2 multi_head_attention(const Tensor2& x_q, const Tensor2& x_kv, const MhaWeights& weights,
                             int num_heads, const AttentionConfig& cfg = {});

}  // namespace tvlab::opt
