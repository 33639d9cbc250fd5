#pragma once
/// @file
/// Device-pointer entry point of chapter 06's causal linear attention on a CUDA device (the kernels
/// behind `tvlab/cuda/linear_attention.hpp`): q, k, v, the state and the outputs already in device
/// memory. No xtensor here, so that nvcc compiles it alone.
/// @ingroup ch06

#include <cstddef>

namespace tvlab::cuda::device {

/// The feature map \f$ \phi \f$, numbered as `tvlab::FeatureMap`.
enum class LinearFeatureMap { elu_plus_one = 0, relu = 1, identity = 2 };

/// One causal linear attention pass from the state (S, z): S updated in place, z written to `z_out`.
struct LinearAttentionArgs {
  const float* q = nullptr;  ///< `[heads, n, m]`
  const float* k = nullptr;  ///< `[heads, n, m]`
  const float* v = nullptr;  ///< `[heads, n, d_v]`
  float* s = nullptr;        ///< \f$ S \f$ `[heads, m, d_v]`, in and out (each thread block its own columns)
  const float* z = nullptr;  ///< \f$ z \f$ `[heads, m]` before the pass
  /// \f$ z \f$ after the pass (another array: every thread block reads z, one writes it).
  float* z_out = nullptr;
  float* out = nullptr;      ///< `[heads, n, d_v]`
  /// 0 when every normaliser was positive and finite and every output finite; 1 otherwise (the host
  /// then lets the reference name the row).
  int* fault = nullptr;
  std::size_t heads = 0, n = 0, m = 0, d_v = 0;
  LinearFeatureMap feature_map = LinearFeatureMap::elu_plus_one;
  bool normalize = true;
  float scale = 1.0f;
  /// Positions per chunk; 0 runs the recurrence token by token.
  std::size_t chunk_size = 0;
};

/// Dynamic shared memory one thread block needs for m features and chunks of `chunk_size`
/// positions (0: the recurrence).
std::size_t linear_attention_shared_bytes(std::size_t m, std::size_t chunk_size);

/// Launches the recurrent (chunk_size 0) or the chunked kernel on `args`.
void causal_linear_attention(const LinearAttentionArgs& args);

}  // namespace tvlab::cuda::device
