#pragma once
// Chapter 02's implementation registry (RoPE application so far).

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "tvlab/core/rope_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ch02 {

struct Impl {
  std::string name;
  bool needs_device = false;
  std::function<Tensor3(const Tensor3&, const RopeFrequencies&, RopeLayout, long long)> apply_rope;
};

const std::vector<Impl>& registry();

inline void PrintTo(const Impl& impl, std::ostream* out) { *out << impl.name; }

}  // namespace tvlab::ch02
