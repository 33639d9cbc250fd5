#pragma once
/// @file
/// Device-pointer entry points of chapter 01's activations (no xtensor here), alone and as the
/// bias + activation epilogue of the FFN's first product.

#include <cstddef>

namespace tvlab::cuda::device {

enum class Activation { relu, gelu, gelu_tanh, silu };

/// x = f(x) elementwise over n values.
void activation_inplace(Activation f, float* x, std::size_t n);
/// x[r, c] = f(x[r, c] + bias[c]) over a [rows, cols] matrix; bias may be null.
void bias_activation_inplace(Activation f, float* x, const float* bias, std::size_t rows, std::size_t cols);

}  // namespace tvlab::cuda::device
