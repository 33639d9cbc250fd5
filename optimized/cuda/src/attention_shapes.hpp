#pragma once
// What every attention kernel's argument struct carries about its inputs: the shapes of q
// [heads, seq_q, head_dim], k [heads, seq_k, head_dim] and v [heads, seq_k, head_dim_v], the
// score scale and the causal flag. Host code only (no CUDA headers).

#include "tvlab/core/tensor.hpp"

namespace tvlab::cuda {

template <class Args>
Args attention_shapes(const Tensor3& q, const Tensor3& k, const Tensor3& v, double scale, bool causal) {
  Args args;
  args.heads = q.shape()[0];
  args.seq_q = q.shape()[1];
  args.head_dim = q.shape()[2];
  args.seq_k = k.shape()[1];
  args.head_dim_v = v.shape()[2];
  args.scale = static_cast<float>(scale);
  args.causal = causal;
  return args;
}

}  // namespace tvlab::cuda
