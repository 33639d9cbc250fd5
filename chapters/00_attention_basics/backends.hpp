#pragma once
/// @file
/// Chapter 00's backend registry: every implementation of the row softmax, scaled dot-product
/// attention and multi-head attention, with what each can run (see `chapters/common/backend.hpp`).

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "../common/backend.hpp"
#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ch00 {

struct Backend {
  std::string name;
  BackendKind kind = BackendKind::reference;
  Capabilities caps;
  std::function<Tensor2(const Tensor2&)> softmax;
  std::function<Tensor3(const Tensor3&, const Tensor3&, const Tensor3&, const AttentionConfig&)> sdpa;
  std::function<Tensor2(const Tensor2&, const Tensor2&, const MhaWeights&, int, const AttentionConfig&)> mha;
};

/// ref, opt, every numbered version of opt's attention (opt_v1, opt_v2, ...), cuda, student.
const std::vector<Backend>& backends();

/// gtest prints a parameter through PrintTo: the backend's name, not its bytes.
inline void PrintTo(const Backend& b, std::ostream* out) { *out << b.name; }

}  // namespace tvlab::ch00
