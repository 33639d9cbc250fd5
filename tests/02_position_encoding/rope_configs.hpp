#pragma once
// A RoPE configuration from the fields the chapter's tests vary, shared by its test files.

#include <string>

#include "tvlab/core/rope_config.hpp"

namespace tvlab::ch02 {

inline RopeConfig config(int head_dim, double theta, const std::string& type, double factor, long long original,
                         long long max_pos) {
  RopeConfig c;
  c.head_dim = head_dim;
  c.rope_theta = theta;
  c.max_position_embeddings = max_pos;
  c.rope_scaling.rope_type = type;
  c.rope_scaling.factor = factor;
  c.rope_scaling.original_max_position_embeddings = original;
  return c;
}

}  // namespace tvlab::ch02
