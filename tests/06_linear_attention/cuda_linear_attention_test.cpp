// Chapter 06's CUDA linear attention: the inputs it rejects before any device call, with the
// reference's messages (these run with a device or without). Its results against the oracle are in
// linear_attention_suite_test.cpp (the registry's `cuda` entry), skipped without a device.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "../common/testing.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/cuda/linear_attention.hpp"

namespace tvlab::cuda {
namespace {

using tvlab::testing::throws_error_naming;

struct Inputs {
  Tensor3 q, k, v;
};
Inputs valid_inputs() {
  Rng rng(640);
  return {rng.normal_tensor(2, 5, 3), rng.normal_tensor(2, 5, 3), rng.normal_tensor(2, 5, 4)};
}

TEST(Ch06CudaLinearAttention, bad_input_is_rejected_before_any_device_call) {
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

}  // namespace
}  // namespace tvlab::cuda
