#pragma once
/// @file
/// Exercise 00.2: your scaled dot-product attention. Same contract as
/// `tvlab::ref::scaled_dot_product_attention`.

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::student {

/// The parts of `AttentionConfig::mask` the worked solution implements: all of them, through
/// `AttentionMask::allows` and `AttentionMask::score_bias`.
inline constexpr MaskSupport kAttentionMaskSupport = kFullMaskSupport;

/// @ingroup ch00
Tensor3 scaled_dot_product_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                     const AttentionConfig& cfg = {});

}  // namespace tvlab::student
