#pragma once
/// @file
/// Device-pointer entry points of chapter 01's normalizations (no xtensor here).

#include <cstddef>

namespace tvlab::cuda::device {

/// y = norm(x) row by row; `beta` is ignored (may be null) for RMSNorm. Device pointers.
struct NormArgs {
  const float* x = nullptr;      ///< [rows, cols]
  const float* gamma = nullptr;  ///< [cols]
  const float* beta = nullptr;   ///< [cols] (LayerNorm only)
  float* y = nullptr;            ///< [rows, cols]
  std::size_t rows = 0, cols = 0;
  double eps = 1e-5;  ///< double: a tiny eps (1e-50) must not round to 0
};

/// Backward: dx `[rows, cols]`, dgamma and dbeta `[cols]` (dbeta null for RMSNorm).
/// `stats` is a workspace of 2 * rows floats (mean and 1/sigma per row).
struct NormBackwardArgs {
  const float* x = nullptr;
  const float* gamma = nullptr;
  const float* dy = nullptr;
  float* dx = nullptr;
  float* dgamma = nullptr;
  float* dbeta = nullptr;
  float* stats = nullptr;
  std::size_t rows = 0, cols = 0;
  double eps = 1e-5;
};

/// One block per row: block-wide sums by warp shuffles, then a fused normalise-scale pass.
void layer_norm_forward(const NormArgs& args);
void rms_norm_forward(const NormArgs& args);
/// Kernel 1 (block per row) writes dx and the row statistics; kernel 2 (thread per column)
/// sums dgamma/dbeta over rows in a fixed order, so results are deterministic (no atomics).
void layer_norm_backward(const NormBackwardArgs& args);
void rms_norm_backward(const NormBackwardArgs& args);

}  // namespace tvlab::cuda::device
