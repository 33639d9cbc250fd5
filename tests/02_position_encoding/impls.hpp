#pragma once
// Chapter 02's implementation registry: RoPE application, ALiBi bias, and attention with positions.

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/rope_config.hpp"
#include "tvlab/ref/alibi.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ch02 {

struct Impl {
  std::string name;
  bool needs_device = false;
  std::function<Tensor3(const Tensor3&, const RopeFrequencies&, RopeLayout, long long)> apply_rope;
  std::function<Tensor3(int, long long, long long, ref::AlibiMode)> alibi_bias;
  std::function<RopeFrequencies(const RopeConfig&, long long)> rope_frequencies;
  /// Chapter 00's attention, here with `cfg.mask.alibi_slopes` set.
  std::function<Tensor3(const Tensor3&, const Tensor3&, const Tensor3&, const AttentionConfig&)> attention;
  /// Attention on q and k rotated by RoPE (`rope_attention`).
  std::function<Tensor3(const Tensor3&, const Tensor3&, const Tensor3&, const AttentionRope&, const AttentionConfig&)>
      rope_attention;
};

const std::vector<Impl>& registry();

inline void PrintTo(const Impl& impl, std::ostream* out) { *out << impl.name; }

}  // namespace tvlab::ch02
