// Chapter 06's exercise 06.2 (exercises/06_linear_attention/exercises.md), over its own small
// table (the student's step; the chapter's test program runs the worked solution, the exercise
// program the student's stub): one token of the gated delta rule, run over whole sequences and
// compared with ref::delta_rule_recurrent for DeltaNet, Gated DeltaNet and KDA, then bad input.
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

}  // namespace
}  // namespace tvlab::linear
