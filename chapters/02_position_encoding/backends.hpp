#pragma once
/// @file
/// Chapter 02's backend registry: every implementation of RoPE, ALiBi's bias, the inverse
/// frequencies and attention with positions, with what each can run (see `chapters/common/backend.hpp`).

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "../common/backend.hpp"
#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/rope_config.hpp"
#include "tvlab/core/tensor.hpp"
#include "tvlab/ref/alibi.hpp"

namespace tvlab::ch02 {

struct Backend {
  std::string name;
  BackendKind kind = BackendKind::reference;
  Capabilities caps;
  std::function<Tensor3(const Tensor3&, const RopeFrequencies&, RopeLayout, long long)> apply_rope;
  std::function<Tensor3(int, long long, long long, ref::AlibiMode)> alibi_bias;
  std::function<RopeFrequencies(const RopeConfig&, long long)> rope_frequencies;
  /// Chapter 00's attention, here with `cfg.mask.alibi_slopes` set.
  std::function<Tensor3(const Tensor3&, const Tensor3&, const Tensor3&, const AttentionConfig&)> attention;
  /// Attention on q and k rotated by RoPE (`rope_attention`).
  std::function<Tensor3(const Tensor3&, const Tensor3&, const Tensor3&, const AttentionRope&, const AttentionConfig&)>
      rope_attention;
};

/// ref, opt, every numbered version of opt's attention, cuda, student.
const std::vector<Backend>& backends();

inline void PrintTo(const Backend& b, std::ostream* out) { *out << b.name; }

}  // namespace tvlab::ch02
