#pragma once
/// @file
/// A deterministic random number generator that gives the same numbers on every platform.
///
/// `std::normal_distribution` is implementation-defined (libstdc++ and libc++ differ), so
/// tests and walkthroughs that must print the same numbers everywhere use this one:
/// xoshiro256** for bits, seeded through SplitMix64, and the Marsaglia polar method for normals.

#include <cstdint>

#include "tvlab/core/tensor.hpp"

namespace tvlab {

class Rng {
 public:
  explicit Rng(std::uint64_t seed);

  std::uint64_t next_u64();
  /// Uniform in [0, 1) with 53 random bits.
  double uniform();
  /// Uniform in [lo, hi).
  double uniform(double lo, double hi);
  /// Standard normal N(0, 1) by the Marsaglia polar method (pairs cached).
  double normal();

  /// Tensors of N(mean, stddev^2) samples, drawn in row-major order.
  Tensor1 normal_vector(std::size_t n, double mean = 0.0, double stddev = 1.0);
  Tensor2 normal_matrix(std::size_t rows, std::size_t cols, double mean = 0.0, double stddev = 1.0);
  Tensor3 normal_tensor(std::size_t a, std::size_t b, std::size_t c, double mean = 0.0, double stddev = 1.0);
  /// The same in double (the oracles and experiments that compute in double).
  DTensor2 normal_dmatrix(std::size_t rows, std::size_t cols, double mean = 0.0, double stddev = 1.0);

 private:
  std::uint64_t state_[4];
  bool has_spare_ = false;
  double spare_ = 0.0;
};

}  // namespace tvlab
