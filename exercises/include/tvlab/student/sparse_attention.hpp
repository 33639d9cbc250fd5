#pragma once
/// @file
/// Exercise 03.3: the inner loop of the sliding-window kernel. Same contract as
/// `tvlab::ref::sliding_window_attention`.

#include <optional>

#include "tvlab/core/attention_mask.hpp"
#include "tvlab/core/flash_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::student {

/// @ingroup ch03
FlashOutput sliding_window_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, SlidingWindow window,
                                     std::optional<double> scale = {});

}  // namespace tvlab::student
