#pragma once
/// @file
/// Scaled dot-product and multi-head attention on OpenBLAS SGEMM (chapter 00).
/// Must match `tvlab::ref::scaled_dot_product_attention` and `ref::multi_head_attention`.

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// @ingroup ch00
/// Per head: \f$ S = \text{scale}\cdot QK^\top \f$ as one SGEMM, the mask applied in place,
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
