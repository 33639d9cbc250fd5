#pragma once
// What chapter 06's delta-rule tests share (delta_rule_test.cpp, delta_rule_suite_test.cpp): one
// call's inputs drawn at random for a member of the family, and the relative RMS error they
// compare with.

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>

#include "tvlab/core/compare.hpp"
#include "tvlab/core/delta_rule_config.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ch06_testing {

/// One call's inputs.
struct Problem {
  Tensor3 q, k, v;
  Tensor2 beta;
  DeltaRuleGate gate;
  DeltaRuleConfig cfg;
  Tensor3 s0 = Tensor3::from_shape({0, 0, 0});
};

enum class Gate { none, scalar, per_channel };

/// Random inputs: q, k, v ~ N(0, 1), beta ~ U[0, 1), log gates log(alpha) with alpha ~ U[0.5, 1),
/// and a state S_0 ~ N(0, 0.25) when `with_state`.
inline Problem random_problem(unsigned long long seed, std::size_t h, std::size_t n, std::size_t d_k,
                              std::size_t d_v, Gate gate, bool with_state) {
  Rng rng(seed);
  Problem p;
  p.q = rng.normal_tensor(h, n, d_k);
  p.k = rng.normal_tensor(h, n, d_k);
  p.v = rng.normal_tensor(h, n, d_v);
  p.beta = Tensor2::from_shape({h, n});
  for (auto& b : p.beta) b = static_cast<float>(rng.uniform());
  if (gate == Gate::scalar) {
    p.gate.scalar = Tensor2::from_shape({h, n});
    for (auto& g : p.gate.scalar) g = static_cast<float>(std::log(rng.uniform(0.5, 1.0)));
  }
  if (gate == Gate::per_channel) {
    p.gate.per_channel = Tensor3::from_shape({h, n, d_k});
    for (auto& g : p.gate.per_channel) g = static_cast<float>(std::log(rng.uniform(0.5, 1.0)));
  }
  if (with_state) p.s0 = rng.normal_tensor(h, d_k, d_v, 0.0, 0.5);
  return p;
}

/// ||x - ref|| / ||ref||, over every element (shapes must agree).
template <class A, class E>
double relative_rms_error(const A& actual, const E& expected) {
  EXPECT_EQ(shape_of(actual), shape_of(expected));
  double error = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double diff = static_cast<double>(actual.data()[i]) - static_cast<double>(expected.data()[i]);
    error += diff * diff;
    norm += static_cast<double>(expected.data()[i]) * expected.data()[i];
  }
  return std::sqrt(error / norm);
}

}  // namespace tvlab::ch06_testing
