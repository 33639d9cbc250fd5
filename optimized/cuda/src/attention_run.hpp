#pragma once
// The device run of chapter 00's attention on host tensors, shared by
// `cuda::scaled_dot_product_attention` and chapter 02's `cuda::rope_attention`. Host code only.

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/rope_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::cuda::detail {

/// Uploads q, k, v and the mask, rotates q and k on the device when `rope` is given, runs the
/// kernels of `device::scaled_dot_product_attention`, and downloads the output. Inputs already
/// checked (the mask within `cuda::kAttentionMaskSupport`).
Tensor3 run_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionConfig& cfg, double scale,
                      const AttentionRope* rope);

}  // namespace tvlab::cuda::detail
