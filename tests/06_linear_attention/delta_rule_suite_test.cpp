// Chapter 06, every backend's delta-rule family (the registry's delta_recurrent and delta_chunked:
// the reference itself, the optimized CPU forms, the CUDA kernels) against the reference's
// recurrence in double: every member of the family, d_v != d_k, a non-zero initial state, ragged
// chunks and chunk sizes from 1 to T; the same errors as the reference. The CUDA cases skip without
// a device, except the checks that reject an input before any device call.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "delta_rule_problem.hpp"
#include "tvlab/core/compare.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/delta_rule.hpp"

namespace tvlab::linear {
namespace {

using tvlab::ch06_testing::Gate;
using tvlab::ch06_testing::Problem;
using tvlab::ch06_testing::random_problem;
using tvlab::ch06_testing::relative_rms_error;
using tvlab::testing::throws_error_naming;

// The tolerance. The optimized and CUDA forms sum in float: an output or a state entry is a sum over the
// positions so far and the d_k channels, T d_k products, and carries reduction_rtol(T d_k) =
// 10 eps sqrt(T d_k) of it (the state's update is a contraction for keys of norm <= 1 and beta in
// [0, 1], so older roundings do not grow; the unnormalised DeltaNet member keeps beta ||k||^2 < 1).
// The chunked form's solve adds one more float sum of length C per entry, inside the same bound.
// A wrong algorithm (a missing beta, the decay after the prediction, a mask off by one) moves the
// result by orders of magnitude more.
double tolerance(std::size_t n, std::size_t d_k) { return reduction_rtol(n * d_k); }

struct Member {
  const char* name;
  Gate gate;
  bool delta;
  bool l2_normalize;
  double key_scale;
};
const Member kMembers[] = {
    {"linear attention", Gate::none, false, false, 0.3},
    {"decayed linear attention (scalar gate)", Gate::scalar, false, false, 1.0},
    {"GLA (per-channel gate)", Gate::per_channel, false, false, 1.0},
    {"DeltaNet", Gate::none, true, true, 1.0},
    {"DeltaNet, short unnormalised keys", Gate::none, true, false, 0.1},
    {"Gated DeltaNet", Gate::scalar, true, true, 1.0},
    {"KDA", Gate::per_channel, true, true, 1.0},
};

class DeltaRule : public ::testing::TestWithParam<Backend> {};

// Checks the backend's recurrent and chunked forms against the reference's recurrence on `p`.
void expect_matches_reference(const Backend& b, const Problem& p, const std::vector<std::size_t>& chunks) {
  const std::size_t n = p.q.shape()[1], d_k = p.q.shape()[2];
  const DeltaRuleOutput expected = ref::delta_rule_recurrent(p.q, p.k, p.v, p.beta, p.gate, p.cfg, p.s0);
  const double tol = tolerance(n, d_k);
  const DeltaRuleOutput recurrent = b.delta_recurrent(p.q, p.k, p.v, p.beta, p.gate, p.cfg, p.s0);
  EXPECT_LE(relative_rms_error(recurrent.o, expected.o), tol) << "recurrent, o";
  EXPECT_LE(relative_rms_error(recurrent.state, expected.state), tol) << "recurrent, state";
  for (std::size_t chunk : chunks) {
    const DeltaRuleOutput chunked = b.delta_chunked(p.q, p.k, p.v, p.beta, p.gate, p.cfg, chunk, p.s0);
    EXPECT_LE(relative_rms_error(chunked.o, expected.o), tol) << "chunked, C = " << chunk << ", o";
    EXPECT_LE(relative_rms_error(chunked.state, expected.state), tol) << "chunked, C = " << chunk << ", state";
  }
}

// h = 3, T = 70 (ragged for C = 16 and 64), d_k = 20 and d_v = 37 (past a SIMD register, neither a
// multiple of the other), a non-zero S_0; chunks of 1, 16, 64, T and more than T.
TEST_P(DeltaRule, every_member_matches_the_reference) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  unsigned long long seed = 650;
  for (const Member& member : kMembers) {
    SCOPED_TRACE(member.name);
    Problem p = random_problem(++seed, 3, 70, 20, 37, member.gate, /*with_state=*/true);
    p.k *= static_cast<float>(member.key_scale);
    p.cfg.delta = member.delta;
    p.cfg.l2_normalize_qk = member.l2_normalize;
    expect_matches_reference(backend, p, {1, 16, 64, 70, 100});
  }
}

// Gated DeltaNet at the benchmark's width (d_k = d_v = 128, several column blocks of S) and a
// longer sequence, without an initial state.
TEST_P(DeltaRule, gated_deltanet_at_width_128_matches_the_reference) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  Problem p = random_problem(660, 2, 300, 128, 128, Gate::scalar, false);
  p.cfg.l2_normalize_qk = true;
  expect_matches_reference(backend, p, {32, 64});
}

// A gate of e^{-10^4} = 0 inside a chunk: the chunked form uses e^{G_i - G_j} (never e^{G_i} e^{-G_j},
// 0 * inf) and forgets as the recurrence does.
TEST_P(DeltaRule, a_gate_of_zero_inside_a_chunk_matches_the_reference) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  for (Gate kind : {Gate::scalar, Gate::per_channel}) {
    Problem p = random_problem(661, 2, 40, 8, 5, kind, true);
    p.cfg.l2_normalize_qk = true;
    if (kind == Gate::scalar) xt::view(p.gate.scalar, xt::all(), 13) = -1e4f;
    if (kind == Gate::per_channel) xt::view(p.gate.per_channel, xt::all(), 13, xt::all()) = -1e4f;
    expect_matches_reference(backend, p, {16});
  }
}

// A small valid problem for the error paths.
Problem valid_problem() { return random_problem(662, 2, 6, 3, 4, Gate::none, true); }

// The backend and the reference reject `p` alike: both messages name the function and every needle.
void expect_both_reject(const Backend& b, const Problem& p, const std::vector<std::string>& needles) {
  auto with = [&](const char* fn) {
    std::vector<std::string> all = needles;
    all.push_back(fn);
    return all;
  };
  EXPECT_TRUE(throws_error_naming([&] { b.delta_recurrent(p.q, p.k, p.v, p.beta, p.gate, p.cfg, p.s0); },
                                  with("delta_rule_recurrent")));
  EXPECT_TRUE(throws_error_naming([&] { b.delta_chunked(p.q, p.k, p.v, p.beta, p.gate, p.cfg, 4, p.s0); },
                                  with("delta_rule_chunked")));
  EXPECT_TRUE(throws_error_naming([&] { ref::delta_rule_recurrent(p.q, p.k, p.v, p.beta, p.gate, p.cfg, p.s0); },
                                  with("delta_rule_recurrent")));
}

// Rejected before any device call: these run for every backend, with a device or without.
TEST_P(DeltaRule, bad_input_gets_the_reference_errors) {
  const Backend& b = GetParam();
  Problem p = valid_problem();
  p.k = Tensor3::from_shape({2, 6, 2});
  expect_both_reject(b, p, {"k has d_k 2, expected 3"});
  p = valid_problem();
  p.s0 = xt::zeros<float>({2, 3, 5});
  expect_both_reject(b, p, {"initial_state has d_v 5, expected 4"});
  p = valid_problem();
  p.beta(1, 2) = 1.5f;
  expect_both_reject(b, p, {"beta (1.5", "[0, 1]"});
  p = valid_problem();
  p.gate.per_channel = xt::zeros<float>({2, 6, 3});
  p.gate.per_channel(0, 4, 2) = 1e-3f;
  expect_both_reject(b, p, {"gate.per_channel (0.001", "must be <= 0"});
  p = valid_problem();
  p.v(1, 5, 3) = NAN;
  expect_both_reject(b, p, {"v has a non-finite value"});
  p = valid_problem();
  p.cfg.scale = 0.0;
  expect_both_reject(b, p, {"cfg.scale (0)"});
  p = valid_problem();
  EXPECT_TRUE(throws_error_naming([&] { b.delta_chunked(p.q, p.k, p.v, p.beta, p.gate, p.cfg, 0, p.s0); },
                                  {"delta_rule_chunked", "chunk_size (0)"}));
}

// A zero row has no direction to normalise: the first one in (head, position) order, q before k
// (found while the rows are normalised, on the device for CUDA).
TEST_P(DeltaRule, a_zero_row_to_normalise_gets_the_reference_error) {
  const Backend& b = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(b);
  Problem p = valid_problem();
  p.cfg.l2_normalize_qk = true;
  xt::view(p.k, 0, 4, xt::all()) = 0.0f;
  xt::view(p.q, 1, 2, xt::all()) = 0.0f;
  expect_both_reject(b, p, {"k has a zero row at head 0, position 4", "cfg.l2_normalize_qk"});
}

// DeltaNet with keys of norm 3 and beta = 1: the update's eigenvalue along k is -8, the state leaves
// float's range, and both forms say why, as the reference does. Scaled v: beyond float without the
// delta rule too, with the other hint.
TEST_P(DeltaRule, diverging_states_get_the_reference_errors) {
  const Backend& b = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(b);
  const Tensor3 no_state = Tensor3::from_shape({0, 0, 0});
  const std::size_t n = 300, d = 4;
  Problem p = random_problem(663, 2, n, d, d, Gate::none, false);
  p.beta = xt::ones<float>({std::size_t{2}, n});
  for (std::size_t t = 0; t < n; ++t) {  // k_t = 3 k_t / ||k_t|| in head 1; head 0 stays short
    const float norm = std::sqrt(static_cast<float>(xt::sum(xt::square(xt::view(p.k, 1, t, xt::all())))()));
    xt::view(p.k, 1, t, xt::all()) *= 3.0f / norm;
    xt::view(p.k, 0, t, xt::all()) *= 0.1f;
  }
  const std::vector<std::string> why = {"of head 1 grew beyond float's range", "sqrt(2/beta)", "cfg.l2_normalize_qk"};
  EXPECT_TRUE(throws_error_naming([&] { ref::delta_rule_recurrent(p.q, p.k, p.v, p.beta, p.gate, p.cfg); }, why));
  EXPECT_TRUE(throws_error_naming([&] { b.delta_recurrent(p.q, p.k, p.v, p.beta, p.gate, p.cfg, no_state); }, why));
  EXPECT_TRUE(throws_error_naming([&] { b.delta_chunked(p.q, p.k, p.v, p.beta, p.gate, p.cfg, 16, no_state); }, why));

  Problem big = random_problem(664, 1, 8, d, d, Gate::none, false);
  big.cfg.delta = false;
  big.v *= 1e37f;
  big.k *= 100.0f;
  big.beta = xt::ones<float>({std::size_t{1}, std::size_t{8}});
  const std::vector<std::string> scale_down = {"grew beyond float's range", "scale q, k or v down"};
  EXPECT_TRUE(throws_error_naming([&] { b.delta_recurrent(big.q, big.k, big.v, big.beta, big.gate, big.cfg, no_state); },
                                  scale_down));
  EXPECT_TRUE(throws_error_naming(
      [&] { b.delta_chunked(big.q, big.k, big.v, big.beta, big.gate, big.cfg, 4, no_state); }, scale_down));
}

// The heads run in parallel and each stops at the first fault it meets, but the error is the
// one the reference raises first, in its order: the input checks (q, k, v finite), then the zero
// rows, then the state or output that left float's range. Head 0 overflows at its first positions;
// head 1's bad input comes last, where its own chunks reach it after head 0 has stopped.
TEST_P(DeltaRule, the_first_error_is_the_references_whichever_head_meets_its_fault_first) {
  const Backend& b = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(b);
  const std::size_t n = 40, d = 4;
  Problem p = random_problem(665, 2, n, d, d, Gate::none, false);
  p.cfg.delta = false;
  p.beta = xt::ones<float>({std::size_t{2}, n});
  xt::view(p.v, 0, xt::all(), xt::all()) *= 1e37f;  // head 0: beyond float from position 0 on
  xt::view(p.k, 0, xt::all(), xt::all()) *= 100.0f;
  Problem late_nan = p;
  late_nan.q(1, n - 1, 2) = NAN;
  expect_both_reject(b, late_nan, {"q has a non-finite value"});
  Problem late_zero = p;
  late_zero.cfg.l2_normalize_qk = true;
  xt::view(late_zero.k, 1, n - 1, xt::all()) = 0.0f;
  expect_both_reject(b, late_zero, {"k has a zero row at head 1, position 39"});
}

// Not graded in the exercise program: exercises 06.2 and 06.3 are parts of these functions, not
// whole ones (exercises_suite_test.cpp grades them).
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DeltaRule);
INSTANTIATE_TEST_SUITE_P(Ch06, DeltaRule,
                         ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::delta_chunked)),
                         tvlab::testing::ImplName());

}  // namespace
}  // namespace tvlab::linear
