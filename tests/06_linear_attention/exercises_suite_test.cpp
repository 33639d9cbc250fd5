// Chapter 06's exercises 06.2 and 06.3 (exercises/06_linear_attention/exercises.md), each over its
// own small table (the student's function; the chapter's test program runs the worked solutions,
// the exercise program the student's stubs):
//   06.2 one token of the gated delta rule, run over whole sequences and compared with
//        ref::delta_rule_recurrent for DeltaNet, Gated DeltaNet and KDA, then bad input;
//   06.3 the UT transform's triangular solve, against the corrections the recurrence computes.
// (Exercise 06.1 is a member of the registry: linear_attention_suite_test.cpp grades it.)

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/delta_rule.hpp"
#include "tvlab/student/delta_rule.hpp"

namespace tvlab::linear {
namespace {

using tvlab::testing::throws_error_naming;

using DeltaStepFn = std::function<Tensor1(Tensor2& state, const Tensor1& q, const Tensor1& k, const Tensor1& v,
                                          double beta, const Tensor1& log_gate, double scale)>;
struct StepBackend {
  std::string name;
  BackendKind kind = BackendKind::student;
  Capabilities caps;
  DeltaStepFn step;
};
void PrintTo(const StepBackend& b, std::ostream* out) { *out << b.name; }

const std::vector<StepBackend>& step_backends() {
  static const std::vector<StepBackend> all = {
      {.name = "student", .kind = BackendKind::student, .step = student::gated_delta_rule_step},
  };
  return all;
}

// ||a - b|| / ||b|| over all elements.
double relative_rms(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  return std::sqrt(diff / norm);
}

class GatedDeltaStepExercise : public ::testing::TestWithParam<StepBackend> {};

// T = 11 tokens of one head, d_k = 4, d_v = 3, keys of norm at most 1 (the rule is stable), from a
// non-zero state: the step applied token by token gives ref::delta_rule_recurrent's outputs and
// final state, for no gate (DeltaNet), one gate for every channel (Gated DeltaNet) and one per
// channel (KDA). Both accumulate in double and round to float: a relative RMS error of 1e-6 is a
// few float roundings.
TEST_P(GatedDeltaStepExercise, a_sequence_of_steps_is_the_reference_recurrence) {
  const StepBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "06.2");
  const std::size_t T = 11, d_k = 4, d_v = 3;
  Rng rng(661);
  Tensor3 q = rng.normal_tensor(1, T, d_k), k = rng.normal_tensor(1, T, d_k);
  const Tensor3 v = rng.normal_tensor(1, T, d_v), initial = rng.normal_tensor(1, d_k, d_v);
  for (std::size_t t = 0; t < T; ++t) {  // k_t / max(1, ||k_t||): norms at most 1
    double norm = 0.0;
    for (std::size_t c = 0; c < d_k; ++c) norm += k(0, t, c) * k(0, t, c);
    for (std::size_t c = 0; c < d_k; ++c) k(0, t, c) /= static_cast<float>(std::max(1.0, std::sqrt(norm)));
  }
  Tensor2 beta = Tensor2::from_shape({1, T});
  for (std::size_t t = 0; t < T; ++t) beta(0, t) = static_cast<float>(0.2 + 0.07 * t);
  const Tensor2 scalar_gate = -0.3f * xt::abs(rng.normal_matrix(1, T));
  const Tensor3 channel_gate = -0.3f * xt::abs(rng.normal_tensor(1, T, d_k));
  struct Member {
    const char* name;
    DeltaRuleGate gate;
  };
  const std::vector<Member> members = {
      {"DeltaNet (no gate)", {}}, {"Gated DeltaNet (one gate)", {scalar_gate, {}}}, {"KDA (a gate per channel)", {{}, channel_gate}}};
  DeltaRuleConfig cfg;
  cfg.scale = 0.5;
  for (const Member& member : members) {
    const DeltaRuleOutput expected = ref::delta_rule_recurrent(q, k, v, beta, member.gate, cfg, initial);
    Tensor2 state = xt::view(initial, 0, xt::all(), xt::all());
    std::vector<double> got, want;
    for (std::size_t t = 0; t < T; ++t) {
      Tensor1 log_gate = xt::zeros<float>({d_k});
      for (std::size_t c = 0; c < d_k; ++c)
        log_gate(c) = member.gate.scalar.size() ? member.gate.scalar(0, t)
                      : member.gate.per_channel.size() ? member.gate.per_channel(0, t, c) : 0.0f;
      const Tensor1 qt = xt::view(q, 0, t, xt::all()), kt = xt::view(k, 0, t, xt::all()), vt = xt::view(v, 0, t, xt::all());
      const Tensor1 o = impl.step(state, qt, kt, vt, beta(0, t), log_gate, 0.5);
      for (std::size_t e = 0; e < d_v; ++e) {
        got.push_back(o(e));
        want.push_back(expected.o(0, t, e));
      }
    }
    EXPECT_LT(relative_rms(got, want), 1e-6)
        << member.name << ": the outputs o_t of 11 steps. The order is decay, predict with the decayed state "
        << "(u = beta (v - S~^T k)), write (S = S~ + k u^T), then read the updated state (o = S^T scale q); "
        << "the usual mistakes: predicting with the state before the decay, reading before the write, "
        << "a gate of e^g applied as g";
    std::vector<double> state_got(state.begin(), state.end()), state_want;
    for (std::size_t i = 0; i < d_k; ++i)
      for (std::size_t e = 0; e < d_v; ++e) state_want.push_back(expected.state(0, i, e));
    EXPECT_LT(relative_rms(state_got, state_want), 1e-6) << member.name << ": the state after 11 steps";
  }
}

// Bad input names the parameter and leaves the state as it was.
TEST_P(GatedDeltaStepExercise, bad_input_names_the_parameter) {
  const StepBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "06.2");
  Rng rng(662);
  Tensor2 state = rng.normal_matrix(4, 3);
  const Tensor2 before = state;
  const Tensor1 q = rng.normal_vector(4), k = rng.normal_vector(4), v = rng.normal_vector(3);
  const Tensor1 no_gate = xt::zeros<float>({std::size_t{4}});
  Tensor1 positive_gate = no_gate;
  positive_gate(2) = 0.1f;
  const std::string fn = "gated_delta_rule_step";
  EXPECT_TRUE(throws_error_naming([&] { impl.step(state, q, k, v, 1.5, no_gate, 1.0); }, {fn, "beta"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.step(state, q, k, v, 0.5, positive_gate, 1.0); }, {fn, "log_gate"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.step(state, q, rng.normal_vector(5), v, 0.5, no_gate, 1.0); }, {fn, "k"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.step(state, q, k, rng.normal_vector(2), 0.5, no_gate, 1.0); }, {fn, "v"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.step(state, q, k, v, 0.5, no_gate, 0.0); }, {fn, "scale"}));
  EXPECT_TRUE(state == before) << "a call that throws must leave the state as it was";
}

INSTANTIATE_TEST_SUITE_P(Ch06, GatedDeltaStepExercise,
                         ::testing::ValuesIn(tvlab::testing::under_test(step_backends(), &StepBackend::step)),
                         tvlab::testing::ImplName());

// ---- 06.3, the UT transform ----

using UtSolveFn = std::function<Tensor2(const Tensor2& a, const Tensor1& beta, const Tensor2& w)>;
struct UtBackend {
  std::string name;
  BackendKind kind = BackendKind::student;
  Capabilities caps;
  UtSolveFn solve;
};
void PrintTo(const UtBackend& b, std::ostream* out) { *out << b.name; }

const std::vector<UtBackend>& ut_backends() {
  static const std::vector<UtBackend> all = {
      {.name = "student", .kind = BackendKind::student, .solve = student::ut_transform_solve},
  };
  return all;
}

class UtTransformExercise : public ::testing::TestWithParam<UtBackend> {};

// A chunk of C = 6 keys (norm <= 1) with a scalar gate and a zero starting state: the chunked
// algorithm's U = solve(A, beta, V) must be the u_t the recurrence computes token by token (written
// here in double); and
// L U = diag(beta) V with L = I + StrictLower(diag(beta) A) (the residual, in double). Float
// outputs of double sums: 1e-6 relative.
TEST_P(UtTransformExercise, the_solve_gives_the_recurrence_s_corrections) {
  const UtBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "06.3");
  const std::size_t c = 6, d_k = 4, d_v = 3;
  Rng rng(671);
  Tensor2 k = rng.normal_matrix(c, d_k);
  for (std::size_t i = 0; i < c; ++i) {
    double norm = 0.0;
    for (std::size_t e = 0; e < d_k; ++e) norm += k(i, e) * k(i, e);
    for (std::size_t e = 0; e < d_k; ++e) k(i, e) /= static_cast<float>(std::max(1.0, std::sqrt(norm)));
  }
  const Tensor2 v = rng.normal_matrix(c, d_v);
  Tensor1 beta = Tensor1::from_shape({c});
  for (std::size_t i = 0; i < c; ++i) beta(i) = static_cast<float>(0.3 + 0.1 * i);
  // a scalar log gate g_t, its cumulative sum G_t, and the decayed products A_ij = k_i . k_j e^{G_i - G_j}
  // (not symmetric: the solve must read A_ij, not A_ji)
  std::vector<double> g(c), cumulative(c);
  for (std::size_t t = 0; t < c; ++t) {
    g[t] = -0.2 - 0.05 * static_cast<double>(t);
    cumulative[t] = (t ? cumulative[t - 1] : 0.0) + g[t];
  }
  Tensor2 a = xt::zeros<float>({c, c});
  for (std::size_t i = 0; i < c; ++i)
    for (std::size_t j = 0; j < c; ++j) {
      double dot = 0.0;
      for (std::size_t e = 0; e < d_k; ++e) dot += static_cast<double>(k(i, e)) * k(j, e);
      a(i, j) = static_cast<float>(dot * std::exp(cumulative[i] - cumulative[j]));
    }
  const Tensor2 u = impl.solve(a, beta, v);
  ASSERT_EQ(u.shape()[0], c);
  ASSERT_EQ(u.shape()[1], d_v);
  // the recurrence's corrections, in double: S~ = e^{g_t} S, u_t = beta_t (v_t - S~^T k_t), S = S~ + k_t u_t^T
  std::vector<double> state(d_k * d_v, 0.0), got, want;
  for (std::size_t t = 0; t < c; ++t) {
    for (double& x : state) x *= std::exp(g[t]);
    for (std::size_t e = 0; e < d_v; ++e) {
      double prediction = 0.0;
      for (std::size_t i = 0; i < d_k; ++i) prediction += state[i * d_v + e] * k(t, i);
      const double u_t = beta(t) * (v(t, e) - prediction);
      for (std::size_t i = 0; i < d_k; ++i) state[i * d_v + e] += k(t, i) * u_t;
      got.push_back(u(t, e));
      want.push_back(u_t);
    }
  }
  EXPECT_LT(relative_rms(got, want), 1e-6)
      << "U must be the recurrence's corrections u_t = beta_t (v_t - S_{t-1}^T k_t): row i of U needs the rows "
      << "j < i already solved, u_i = beta_i (w_i - sum_{j<i} A_ij u_j); the usual mistakes: j <= i (the "
      << "diagonal of A is not part of the solve), beta applied to the sum's terms but not to w_i";
  // residual of L U = diag(beta) W
  std::vector<double> lhs, rhs;
  for (std::size_t i = 0; i < c; ++i)
    for (std::size_t e = 0; e < d_v; ++e) {
      double x = u(i, e);
      for (std::size_t j = 0; j < i; ++j) x += static_cast<double>(beta(i)) * a(i, j) * u(j, e);
      lhs.push_back(x);
      rhs.push_back(static_cast<double>(beta(i)) * v(i, e));
    }
  EXPECT_LT(relative_rms(lhs, rhs), 1e-6) << "(I + StrictLower(diag(beta) A)) U = diag(beta) W";
}

TEST_P(UtTransformExercise, bad_input_names_the_parameter) {
  const UtBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "06.3");
  Rng rng(672);
  const Tensor2 a = rng.normal_matrix(3, 3), w = rng.normal_matrix(3, 2);
  const Tensor1 beta = {0.5f, 0.5f, 0.5f};
  const std::string fn = "ut_transform_solve";
  EXPECT_TRUE(throws_error_naming([&] { impl.solve(rng.normal_matrix(3, 4), beta, w); }, {fn, "a"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.solve(a, Tensor1{0.5f, 0.5f}, w); }, {fn, "beta"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.solve(a, Tensor1{0.5f, 1.5f, 0.5f}, w); }, {fn, "beta"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.solve(a, beta, rng.normal_matrix(4, 2)); }, {fn, "w"}));
}

INSTANTIATE_TEST_SUITE_P(Ch06, UtTransformExercise,
                         ::testing::ValuesIn(tvlab::testing::under_test(ut_backends(), &UtBackend::solve)),
                         tvlab::testing::ImplName());

}  // namespace
}  // namespace tvlab::linear
