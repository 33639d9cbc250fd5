#pragma once
/// @file
/// Device-pointer entry point of chapter 01's FFN epilogues (no xtensor here). The FFNs' products
/// are `device::sgemm` (`blas.hpp`); the bias + activation epilogue is
/// `device::bias_activation_inplace` (`activations_device.hpp`).

#include <cstddef>

namespace tvlab::cuda::device {

/// out = SiLU(gate) * up elementwise over n values (out may alias gate).
void swiglu_combine(const float* gate, const float* up, float* out, std::size_t n);

}  // namespace tvlab::cuda::device
