#pragma once
/// @file
/// The RoPE settings of a Hugging Face `config.json` (chapter 02), read into a `RopeConfig`.

#include <string>

#include "tvlab/core/rope_config.hpp"

namespace tvlab {

/// A `RopeConfig` read from a Hugging Face `config.json`, and whether the file gave the factor.
struct HfRopeConfig {
  RopeConfig config;
  /// false: the file has no `factor` and `config.rope_scaling.factor` is
  /// max_position_embeddings / original_max_position_embeddings, as transformers computes it for
  /// yarn and longrope (Phi-3, DeepSeek); a caller that changes either length recomputes it.
  bool factor_given = true;
};

/// Reads `path`, a model's `config.json`, as transformers (5.x) reads it for the RoPE
/// initialisation functions:
/// - `rope_theta` (top level, or inside the rope block; 10000 when absent);
/// - `max_position_embeddings` (required);
/// - `head_dim`, or `hidden_size / num_attention_heads` when it is absent or null;
/// - `partial_rotary_factor` (top level or inside the rope block; 1 when absent);
/// - the rope block `rope_parameters` (newer transformers) or `rope_scaling` (older), absent or null
///   for plain RoPE: `rope_type` (or the older `type`), `factor`, `original_max_position_embeddings`
///   (a top-level value of it wins, as transformers does for Phi-3; for llama3, yarn and longrope it
///   defaults to max_position_embeddings), `beta_fast`, `beta_slow`, `attention_factor`, `mscale`,
///   `mscale_all_dim`, `truncate`, `low_freq_factor`, `high_freq_factor`, `short_factor`,
///   `long_factor`. A null value counts as absent.
/// Then validates the result (`validate_rope_config`). Every problem (a missing file, malformed
/// JSON, a field of the wrong type, a value out of range, a block nested by layer type) throws a
/// one-line `tvlab::Error` naming the file and the field.
HfRopeConfig read_hf_rope_config(const std::string& path);

}  // namespace tvlab
