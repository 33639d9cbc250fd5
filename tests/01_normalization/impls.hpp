#pragma once
// Chapter 01's implementation registry: every backend of the norms, activations and FFNs.

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "tvlab/core/ffn_types.hpp"
#include "tvlab/core/norm_types.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ch01 {

using Unary = std::function<Tensor2(const Tensor2&)>;

struct Impl {
  std::string name;
  bool needs_device = false;
  std::function<Tensor2(const Tensor2&, const Tensor1&, const Tensor1&, double)> layer_norm;
  std::function<LayerNormGrads(const Tensor2&, const Tensor1&, const Tensor2&, double)> layer_norm_backward;
  std::function<Tensor2(const Tensor2&, const Tensor1&, double)> rms_norm;
  std::function<RmsNormGrads(const Tensor2&, const Tensor1&, const Tensor2&, double)> rms_norm_backward;
  Unary relu, gelu, gelu_tanh, silu;
  std::function<Tensor2(const Tensor2&, const FfnWeights&)> ffn_relu, ffn_gelu;
  std::function<Tensor2(const Tensor2&, const SwigluWeights&)> ffn_swiglu;
};

const std::vector<Impl>& registry();

/// gtest prints a parameter through PrintTo: the implementation's name, not its bytes.
inline void PrintTo(const Impl& impl, std::ostream* out) { *out << impl.name; }

}  // namespace tvlab::ch01
