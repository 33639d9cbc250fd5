// Chapter 06's CUDA kernels beyond what the suites check: the inputs they reject before any device
// call, with the reference's messages (these run with a device or without); a prompt followed by
// decode steps of the delta rule, each call from the state the previous one left; the shared-memory
// limit, named. Their results against the oracle for every member, shape and chunk size are in
// linear_attention_suite_test.cpp and delta_rule_suite_test.cpp (the registry's `cuda` entry). Every
// test is named cuda_* (ctest label ch06-gpu); those that need a device skip without one.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "../common/testing.hpp"
#include "delta_rule_problem.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/cuda/delta_rule.hpp"
#include "tvlab/cuda/linear_attention.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "tvlab/ref/delta_rule.hpp"

namespace tvlab::cuda {
namespace {

using tvlab::ch06_testing::Gate;
using tvlab::ch06_testing::Problem;
using tvlab::ch06_testing::random_problem;
using tvlab::ch06_testing::relative_rms_error;
using tvlab::testing::throws_error_naming;

struct Inputs {
  Tensor3 q, k, v;
};
Inputs valid_inputs() {
  Rng rng(640);
  return {rng.normal_tensor(2, 5, 3), rng.normal_tensor(2, 5, 3), rng.normal_tensor(2, 5, 4)};
}

TEST(Ch06CudaLinearAttention, cuda_bad_input_is_rejected_before_any_device_call) {
  const Inputs in = valid_inputs();
  LinearAttentionState state(2, 3, 4);
  const LinearAttentionConfig cfg;
  EXPECT_TRUE(throws_error_naming([&] { causal_linear_attention_chunked(in.q, in.k, in.v, cfg, 0, state); },
                                  {"causal_linear_attention_chunked", "chunk_size (0)"}));
  const Tensor3 narrow_k = Tensor3::from_shape({2, 5, 2});
  EXPECT_TRUE(throws_error_naming([&] { causal_linear_attention_recurrent(in.q, narrow_k, in.v, cfg, state); },
                                  {"causal_linear_attention_recurrent", "k has d_k 2, expected 3"}));
  LinearAttentionState wrong(2, 3, 5);
  EXPECT_TRUE(throws_error_naming([&] { causal_linear_attention_chunked(in.q, in.k, in.v, cfg, 2, wrong); },
                                  {"causal_linear_attention_chunked", "state.s"}));
  LinearAttentionState nan_state(2, 3, 4);
  nan_state.z(1, 2) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { causal_linear_attention_recurrent(in.q, in.k, in.v, cfg, nan_state); },
                                  {"causal_linear_attention_recurrent", "state.z has a non-finite value"}));
  LinearAttentionConfig bad_scale;
  bad_scale.scale = -1.0;
  EXPECT_TRUE(throws_error_naming([&] { causal_linear_attention_recurrent(in.q, in.k, in.v, bad_scale, state); },
                                  {"causal_linear_attention_recurrent", "cfg.scale (-1)"}));
  LinearAttentionConfig tiny_scale;
  tiny_scale.scale = 1e-60;  // positive in double, 0 in float
  EXPECT_TRUE(throws_error_naming([&] { causal_linear_attention_chunked(in.q, in.k, in.v, tiny_scale, 2, state); },
                                  {"causal_linear_attention_chunked", "cfg.scale", "float"}));
  // a rejected call leaves the state as it was
  EXPECT_EQ(state.s, LinearAttentionState(2, 3, 4).s);
}

// The delta rule's scale as the device multiplies by it: positive in double, 0 in float, rejected
// before any device call.
TEST(Ch06CudaDeltaRule, cuda_a_scale_that_vanishes_in_float_is_rejected_before_any_device_call) {
  Problem p = random_problem(671, 2, 6, 3, 4, Gate::scalar, true);
  p.cfg.scale = 1e-60;
  EXPECT_TRUE(throws_error_naming([&] { delta_rule_recurrent(p.q, p.k, p.v, p.beta, p.gate, p.cfg, p.s0); },
                                  {"delta_rule_recurrent", "cfg.scale", "float"}));
  EXPECT_TRUE(throws_error_naming([&] { delta_rule_chunked(p.q, p.k, p.v, p.beta, p.gate, p.cfg, 4, p.s0); },
                                  {"delta_rule_chunked", "cfg.scale", "float"}));
}

// Positions [begin, end) of every input of `p`, from the state `s0`.
Problem positions(const Problem& p, std::size_t begin, std::size_t end, const Tensor3& s0) {
  Problem part;
  part.q = xt::view(p.q, xt::all(), xt::range(begin, end), xt::all());
  part.k = xt::view(p.k, xt::all(), xt::range(begin, end), xt::all());
  part.v = xt::view(p.v, xt::all(), xt::range(begin, end), xt::all());
  part.beta = xt::view(p.beta, xt::all(), xt::range(begin, end));
  if (p.gate.scalar.size() != 0) part.gate.scalar = xt::view(p.gate.scalar, xt::all(), xt::range(begin, end));
  if (p.gate.per_channel.size() != 0)
    part.gate.per_channel = xt::view(p.gate.per_channel, xt::all(), xt::range(begin, end), xt::all());
  part.cfg = p.cfg;
  part.s0 = s0;
  return part;
}

// Serving: a prompt of 19 positions through the chunked kernel (chunks of 8, the last ragged), then
// 9 decode steps of one token through the recurrent kernel, each from the state the call before
// left, equal the reference's one pass over the 28 positions: outputs and final state. d_k = 40 and
// d_v = 70 (three column blocks of the state, the last 6 wide), Gated DeltaNet and KDA, from a
// non-zero initial state. Tolerance as in delta_rule_suite_test.cpp: float sums of T d_k products
// per entry, reduction_rtol(T d_k) in relative RMS (a state carried wrongly between calls, such as
// a column block's state not written back, is off by order 1).
TEST(Ch06CudaDeltaRule, cuda_a_prompt_then_decode_steps_equal_one_pass) {
  TVLAB_SKIP_WITHOUT_CUDA_DEVICE();
  const std::size_t n = 28, prompt = 19, d_k = 40, d_v = 70;
  for (Gate kind : {Gate::scalar, Gate::per_channel}) {
    SCOPED_TRACE(kind == Gate::scalar ? "Gated DeltaNet" : "KDA");
    Problem p = random_problem(672, 2, n, d_k, d_v, kind, /*with_state=*/true);
    p.cfg.l2_normalize_qk = true;
    const DeltaRuleOutput expected = ref::delta_rule_recurrent(p.q, p.k, p.v, p.beta, p.gate, p.cfg, p.s0);
    const double tol = reduction_rtol(n * d_k);
    const Problem first = positions(p, 0, prompt, p.s0);
    DeltaRuleOutput step = delta_rule_chunked(first.q, first.k, first.v, first.beta, first.gate, first.cfg, 8, first.s0);
    const Tensor3 expected_prompt = xt::view(expected.o, xt::all(), xt::range(0, prompt), xt::all());
    EXPECT_LE(relative_rms_error(step.o, expected_prompt), tol) << "the prompt";
    for (std::size_t t = prompt; t < n; ++t) {
      const Problem token = positions(p, t, t + 1, step.state);
      step = delta_rule_recurrent(token.q, token.k, token.v, token.beta, token.gate, token.cfg, token.s0);
      const Tensor3 expected_token = xt::view(expected.o, xt::all(), xt::range(t, t + 1), xt::all());
      EXPECT_LE(relative_rms_error(step.o, expected_token), tol) << "decode step at position " << t;
    }
    EXPECT_LE(relative_rms_error(step.state, expected.state), tol) << "the state after the last step";
  }
}

// What does not fit one thread block's shared memory is named, before any kernel runs: a chunk of
// 256 positions at d_k = 64 (425 KB for linear attention, 683 KB for Gated DeltaNet) names
// chunk_size; d_k = 2048 (281 KB for the recurrences' 32 columns of S) names d_k. Beyond every
// current device's limit (227 KB on sm_90). The linear attention state is left as it was.
TEST(Ch06CudaLimits, cuda_what_does_not_fit_shared_memory_is_named) {
  TVLAB_SKIP_WITHOUT_CUDA_DEVICE();
  Rng rng(673);
  const std::size_t n = 256;
  const Tensor3 q = rng.normal_tensor(1, n, 64), k = rng.normal_tensor(1, n, 64), v = rng.normal_tensor(1, n, 4);
  LinearAttentionState state(1, 64, 4);
  EXPECT_TRUE(throws_error_naming([&] { causal_linear_attention_chunked(q, k, v, {}, n, state); },
                                  {"causal_linear_attention_chunked", "chunk_size (256)", "shared memory"}));
  EXPECT_EQ(state.s, LinearAttentionState(1, 64, 4).s);
  const Problem p = random_problem(674, 1, n, 64, 4, Gate::scalar, false);
  EXPECT_TRUE(throws_error_naming([&] { delta_rule_chunked(p.q, p.k, p.v, p.beta, p.gate, p.cfg, n, p.s0); },
                                  {"delta_rule_chunked", "chunk_size (256)", "shared memory"}));

  const Tensor3 wide_q = rng.normal_tensor(1, 2, 2048), wide_k = rng.normal_tensor(1, 2, 2048);
  const Tensor3 narrow_v = rng.normal_tensor(1, 2, 4);
  LinearAttentionState wide(1, 2048, 4);
  EXPECT_TRUE(throws_error_naming([&] { causal_linear_attention_recurrent(wide_q, wide_k, narrow_v, {}, wide); },
                                  {"causal_linear_attention_recurrent", "d_k (2048)", "shared memory"}));
  const Problem w = random_problem(675, 1, 2, 2048, 4, Gate::none, false);
  EXPECT_TRUE(throws_error_naming([&] { delta_rule_recurrent(w.q, w.k, w.v, w.beta, w.gate, w.cfg, w.s0); },
                                  {"delta_rule_recurrent", "d_k (2048)", "shared memory"}));
}

}  // namespace
}  // namespace tvlab::cuda
