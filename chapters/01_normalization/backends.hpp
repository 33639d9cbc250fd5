#pragma once
/// @file
/// Chapter 01's backend registry: every implementation of the norms (forward and backward), the
/// activations and the FFNs, with what each can run (see `chapters/common/backend.hpp`).

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "../common/backend.hpp"
#include "tvlab/core/ffn_types.hpp"
#include "tvlab/core/norm_types.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ch01 {

using Unary = std::function<Tensor2(const Tensor2&)>;

struct Backend {
  std::string name;
  BackendKind kind = BackendKind::reference;
  Capabilities caps;
  std::function<Tensor2(const Tensor2&, const Tensor1&, const Tensor1&, double)> layer_norm;
  std::function<LayerNormGrads(const Tensor2&, const Tensor1&, const Tensor2&, double)> layer_norm_backward;
  std::function<Tensor2(const Tensor2&, const Tensor1&, double)> rms_norm;
  std::function<RmsNormGrads(const Tensor2&, const Tensor1&, const Tensor2&, double)> rms_norm_backward;
  Unary relu, gelu, gelu_tanh, silu;
  std::function<Tensor2(const Tensor2&, const FfnWeights&)> ffn_relu, ffn_gelu;
  std::function<Tensor2(const Tensor2&, const SwigluWeights&)> ffn_swiglu;
};

/// ref, opt, cuda, student.
const std::vector<Backend>& backends();

inline void PrintTo(const Backend& b, std::ostream* out) { *out << b.name; }

}  // namespace tvlab::ch01
