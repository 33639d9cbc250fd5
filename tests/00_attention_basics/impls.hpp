#pragma once
// Chapter 00's implementation registry: every backend of softmax / attention under one name.

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ch00 {

struct Impl {
  std::string name;
  bool needs_device = false;
  std::function<Tensor2(const Tensor2&)> softmax;
  std::function<Tensor3(const Tensor3&, const Tensor3&, const Tensor3&, const AttentionConfig&)> sdpa;
  std::function<Tensor2(const Tensor2&, const Tensor2&, const MhaWeights&, int, const AttentionConfig&)> mha;
  /// The parts of `AttentionConfig::mask` sdpa and mha implement; the others must throw.
  MaskSupport mask_support;
};

/// ref, opt, cuda in the chapter's test program; student in the exercise program.
const std::vector<Impl>& registry();

/// gtest prints a parameter through PrintTo: the implementation's name, not its bytes.
inline void PrintTo(const Impl& impl, std::ostream* out) { *out << impl.name; }

}  // namespace tvlab::ch00
