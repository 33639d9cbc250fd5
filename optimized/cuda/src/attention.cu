// CUDA attention of chapter 00: two cuBLAS strided-batched SGEMMs (blas.cu) around the masked
// softmax kernel (softmax.cu), one matrix per head. No kernel of its own and no xtensor here;
// the host-tensor wrappers are in attention_host.cpp.

#include "tvlab/cuda/attention_device.hpp"
#include "tvlab/cuda/blas.hpp"
#include "tvlab/cuda/softmax_device.hpp"

namespace tvlab::cuda::device {

void scaled_dot_product_attention(const AttentionArgs& p) {
  // S_h = scale * Q_h K_h^T for every head h (K stored [seq_k, head_dim]: op(B) = B^T).
  sgemm_strided_batched(p.heads, p.seq_q, p.seq_k, p.head_dim, p.scale, p.q, p.seq_q * p.head_dim, p.k,
                        p.seq_k * p.head_dim, /*transpose_b=*/true, p.scores, p.seq_q * p.seq_k);
  MaskedSoftmaxArgs softmax;
  softmax.scores = p.scores;
  softmax.mask = p.mask;
  softmax.additive_mask = p.additive_mask;
  softmax.alibi_slopes = p.alibi_slopes;
  softmax.heads = p.heads;
  softmax.seq_q = p.seq_q;
  softmax.seq_k = p.seq_k;
  softmax.causal = p.causal;
  masked_softmax_rows(softmax);
  // O_h = P_h V_h.
  sgemm_strided_batched(p.heads, p.seq_q, p.head_dim_v, p.seq_k, 1.0f, p.scores, p.seq_q * p.seq_k, p.v,
                        p.seq_k * p.head_dim_v, /*transpose_b=*/false, p.out, p.seq_q * p.head_dim_v);
}

}  // namespace tvlab::cuda::device
