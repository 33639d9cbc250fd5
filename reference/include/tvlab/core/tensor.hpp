#pragma once
/// @file
/// Tensor aliases shared by every implementation.
///
/// All containers are row-major `xt::xtensor`. Attention tensors are `[heads, seq, head_dim]`;
/// token batches (FFN, norms) are `[tokens, d_model]`. Reference oracles in tests use the
/// double-precision aliases.

#include <array>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "tvlab/core/xt.hpp"

namespace tvlab {

using Tensor1 = xt::xtensor<float, 1>;   ///< a vector, e.g. a norm gain `[d_model]`
using Tensor2 = xt::xtensor<float, 2>;   ///< a matrix, e.g. tokens `[tokens, d_model]`
using Tensor3 = xt::xtensor<float, 3>;   ///< attention tensors `[heads, seq, head_dim]`
using Tensor4 = xt::xtensor<float, 4>;
using DTensor1 = xt::xtensor<double, 1>;
using DTensor2 = xt::xtensor<double, 2>;
using DTensor3 = xt::xtensor<double, 3>;
using Mask2 = xt::xtensor<bool, 2>;      ///< boolean mask `[seq_q, seq_k]`, true = may attend

/// The number of elements of a tensor of `shape`. Throws tvlab::Error naming `function` when the
/// product does not fit in `std::size_t`: xtensor would wrap it around (to 0 for 2^22 x 2^22 x 2^20)
/// and make a tensor whose buffer is far smaller than its shape.
std::size_t checked_element_count(std::string_view function, std::initializer_list<std::size_t> shape);

/// Shape of a tensor as a `std::vector`, for messages.
template <class T>
std::vector<std::size_t> shape_of(const T& t) {
  return std::vector<std::size_t>(t.shape().begin(), t.shape().end());
}

/// "[2, 3, 4]" for messages.
std::string shape_string(const std::vector<std::size_t>& shape);

template <class T>
std::string shape_string_of(const T& t) {
  return shape_string(shape_of(t));
}

}  // namespace tvlab
