#pragma once
/// @file
/// The mask options of every attention command (`tvlab attention`, `tvlab flash`, and the
/// chapters built on them): `--causal`, `--causal-align`, `--window`, turned into the one
/// mask specification of core (`tvlab::AttentionMask`).

#include <string>

#include "common/command.hpp"
#include "tvlab/core/attention_mask.hpp"

namespace tvlab::cli {

struct MaskOptions {
  bool causal = false;
  std::string causal_align = "bottom-right";  ///< top-left (PyTorch's is_causal) | bottom-right (FlashAttention's, a KV cache's)
  std::string window;                         ///< "" (none), "L" (L keys back) or "L,R" (L back, R ahead)
};

/// Adds --causal, --causal-align and --window to a chapter command.
void add_mask_options(Command& command, MaskOptions& options);

/// The mask the options describe. Throws tvlab::Error naming the option for a malformed
/// --window or --causal-align.
AttentionMask attention_mask(const MaskOptions& options);

/// "causal (bottom-right), window 3 back and 0 ahead", or "no mask": for titles and --step.
std::string describe(const AttentionMask& mask);

}  // namespace tvlab::cli
