#pragma once
/// @file
/// What the n x n attention matrix costs: bytes of S and A, and the FLOPs of a Transformer
/// layer split between attention and FFN (chapter 00). MACs (multiply-adds) and FLOPs are kept
/// apart: a `[n, d] x [d, m]` product is \f$ n d m \f$ MACs = \f$ 2 n d m \f$ FLOPs.

#include <string>

namespace tvlab::analysis {

/// Storage formats: the float formats and the integer ones KV-cache quantization uses (chapter 05).
enum class DType { fp32, fp16, bf16, fp8, int8, int4 };
/// Bytes per element: 4, 2, 2, 1, 1, 0.5 (INT4 packs two values in a byte; the scales and zero
/// points of a quantized format are not counted).
double bytes_per_element(DType dtype);
/// "fp32", "fp16", "bf16", "fp8", "int8", "int4".
const char* dtype_name(DType dtype);

/// Memory of the attention score matrices \f$ S = QK^\top/\sqrt{d_k} \f$ and \f$ A = \mathrm{softmax}(S) \f$
/// kept by the standard (unfused) algorithm for one sequence (batch 1).
struct AttentionMatrixMemory {
  double elements_per_matrix = 0;  ///< \f$ n^2 \f$
  double bytes_per_head = 0;       ///< matrices_per_head x n^2 x bytes
  double bytes_per_layer = 0;      ///< x num_heads
  double bytes_total = 0;          ///< x attention_sublayers
};

/// @param seq n; @param num_heads h (each head has its own S and A);
/// @param attention_sublayers how many attention blocks hold such matrices (an encoder-decoder
///        with N layers per side has 3N: encoder self, decoder self, decoder cross);
/// @param matrices_per_head 2 for S and A, 1 for a single matrix.
AttentionMatrixMemory attention_matrix_memory(long long seq, long long num_heads, long long attention_sublayers,
                                              DType dtype, int matrices_per_head = 2);

/// MACs of one Transformer layer for n tokens (batch 1), all heads, softmax and norms excluded.
struct LayerMacs {
  double qkvo_projection = 0;  ///< \f$ 4 n d^2 \f$: \f$ XW_Q, XW_K, XW_V \f$ and the output projection
  double scores = 0;           ///< \f$ n^2 d \f$: \f$ QK^\top \f$ over all heads (h n^2 d_k)
  double weighted_values = 0;  ///< \f$ n^2 d \f$: \f$ AV \f$
  double ffn = 0;              ///< \f$ 2 n d d_{ff} \f$
  double attention() const { return qkvo_projection + scores + weighted_values; }
  double total() const { return attention() + ffn; }
  double ffn_share() const { return ffn / total(); }  ///< same in MACs or FLOPs
};

/// @param seq n, @param d_model d, @param d_ff the FFN width. Throws `tvlab::Error` for sizes <= 0.
LayerMacs layer_macs(long long seq, long long d_model, long long d_ff);

/// Parameters of one layer without biases: attention \f$ 4d^2 \f$ (independent of the head count
/// when \f$ d_k = d/h \f$), FFN \f$ 2 d\, d_{ff} \f$.
struct LayerParams {
  double attention = 0;
  double ffn = 0;
};
LayerParams layer_params(long long d_model, long long d_ff);

/// Parameters of one attention block with biases:
/// \f$ W_Q, W_K, W_V \in \mathbb{R}^{d \times h d_k} \f$ (+ \f$ 3 h d_k \f$ biases) and, when
/// `output_projection`, \f$ W_O \in \mathbb{R}^{h d_k \times d} \f$ (+ \f$ d \f$). With
/// \f$ d_k = d/h \f$ the count does not depend on \f$ h \f$; a bare single head (no \f$ W_O \f$,
/// as in attention before 2017) lacks the \f$ d^2 + d \f$ of the output projection.
/// Throws `tvlab::Error` for sizes <= 0.
double attention_params(long long d_model, long long num_heads, long long head_dim, bool output_projection);

/// The work of the attention core \f$ \mathrm{softmax}(QK^\top/\sqrt{d_k})V \f$ for n queries and
/// n keys, h heads of width \f$ d_k \f$ (projections excluded).
struct AttentionCoreWork {
  double matmul_flops = 0;    ///< \f$ 4 n^2 h d_k \f$: \f$ QK^\top \f$ and \f$ PV \f$, 2 FLOPs per multiply-add
  double score_elements = 0;  ///< \f$ h n^2 \f$: one score matrix per head
  double exponentials = 0;    ///< \f$ h n^2 \f$: one exponential per score
};
/// Throws `tvlab::Error` for sizes <= 0.
AttentionCoreWork attention_core_work(long long seq, long long num_heads, long long head_dim);

/// "268.4 MB (256.0 MiB)": decimal and binary units side by side, because the documents mix them.
std::string format_bytes(double bytes);

}  // namespace tvlab::analysis
