#pragma once
/// @file
/// CUDA attention with rotary position embeddings (chapter 02), host tensors in and out. Must
/// match `tvlab::ref::rope_attention`. No kernels of its own (so no rope_attention.cu or
/// rope_attention_device.hpp): rope_attention_host.cpp runs rope.cu's kernel on q and k, then
/// chapter 00's attention (attention.cu, softmax.cu, blas.cu).

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/rope_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::cuda {

/// @ingroup ch02
/// q and k rotated in place on the device (`device::apply_rope_inplace`, the cos/sin table built
/// on the host in double), then the kernels of `cuda::scaled_dot_product_attention`; the mask as
/// there (`cuda::kAttentionMaskSupport`).
Tensor3 rope_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionRope& rope,
                       const AttentionConfig& cfg = {});

}  // namespace tvlab::cuda
