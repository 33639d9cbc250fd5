#pragma once
/// @file
/// Attention with rotary position embeddings on the CPU (chapter 02). Must match
/// `tvlab::ref::rope_attention`.

#include <string>
#include <vector>

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/rope_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::opt {

/// @ingroup ch02
/// Version 1: q and k rotated by `opt::apply_rope` in a pass of their own, then
/// `opt::scaled_dot_product_attention_v1` on the rotated copies.
Tensor3 rope_attention_v1(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionRope& rope,
                          const AttentionConfig& cfg = {});

/// @ingroup ch02
/// Version 2: RoPE fused into the load of `opt::scaled_dot_product_attention_v2`: each thread
/// rotates its head's q and k from one cos/sin cache while copying them into private buffers that
/// the SGEMM then reads (one read of q and k, no rotated copy of the whole tensors). This is what
/// `rope_attention` runs.
Tensor3 rope_attention_v2(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionRope& rope,
                          const AttentionConfig& cfg = {});

/// One entry of the variant table of attention with RoPE, in the order of chapter 00's versions.
struct RopeAttentionVariant {
  std::string name;    ///< "v1", "v2"
  std::string change;  ///< how it applies RoPE
  Tensor3 (*function)(const Tensor3&, const Tensor3&, const Tensor3&, const AttentionRope&, const AttentionConfig&);
};

/// @ingroup ch02
/// v1, v2; the last one is the headline version.
const std::vector<RopeAttentionVariant>& rope_attention_variants();

/// @ingroup ch02
/// The headline version (`rope_attention_v2`). Same contract as `ref::rope_attention`; the mask
/// as `opt::scaled_dot_product_attention` (`opt::kAttentionMaskSupport`).
Tensor3 rope_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionRope& rope,
                       const AttentionConfig& cfg = {});

}  // namespace tvlab::opt
