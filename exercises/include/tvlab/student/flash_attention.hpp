#pragma once
/// @file
/// Exercise 04.2: flash attention's tiled forward pass. Same contract as
/// `tvlab::ref::flash_attention_forward` (low precision not required: `require_fp32_flash` rejects `cfg.fp8` and `cfg.inputs`).

#include "tvlab/core/flash_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::student {

/// The parts of `FlashConfig::mask` exercise 04.2 implements: the causal rule with the bottom-right
/// alignment (its tests use nothing else); the others throw through `require_supported`.
inline constexpr MaskSupport kFlashMaskSupport{.causal = true};

/// @ingroup ch04
FlashOutput flash_attention_forward(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg = {});

}  // namespace tvlab::student
