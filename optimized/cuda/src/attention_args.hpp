#pragma once
// What every attention kernel's argument struct gets from the host tensors, shared by the
// attention and flash attention wrappers: the shapes of q [heads, seq_q, head_dim],
// k [heads, seq_k, head_dim] and v [heads, seq_k, head_dim_v], the score scale and the causal
// flag (`attention_shapes`), and q, k and v on the device (`DeviceQkv`). Host code only (no CUDA
// headers).

#include "tvlab/core/tensor.hpp"
#include "tvlab/cuda/runtime.hpp"

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

/// q, k and v uploaded to the device: floats, or the bits of 16-bit values for the tensor cores.
template <class T>
struct DeviceQkv {
  /// From any three contiguous host containers of T (tensors, vectors).
  template <class Host>
  DeviceQkv(const Host& q_host, const Host& k_host, const Host& v_host)
      : q(q_host.data(), q_host.size()), k(k_host.data(), k_host.size()), v(v_host.data(), v_host.size()) {}

  /// Points the argument struct's q, k and v at the device copies.
  template <class Args>
  void bind(Args& args) const {
    args.q = q.get();
    args.k = k.get();
    args.v = v.get();
  }

  DeviceBuffer<T> q, k, v;
};

}  // namespace tvlab::cuda
