// Chapter 06, the state of linear attention against chapter 05's KV cache, from the closed forms:
// a state of h d_k d_v numbers per layer, a cache of 2 g d_h per token and layer.

#include <gtest/gtest.h>

#include "../common/testing.hpp"
#include "tvlab/analysis/linear_state_memory.hpp"

namespace tvlab::analysis {
namespace {

using tvlab::testing::throws_error_naming;

TEST(Ch06StateMemory, the_state_is_constant_and_the_cache_grows) {
  const ModelConfig& llama = named_model_config("llama-3-8b");  // 32 layers, 32 heads, 8 kv heads of 128
  const auto rows = state_against_kv_cache(llama, {256, 4096, 1 << 20}, DType::bf16);
  // state: 32 layers x 32 heads x 128 x 128 x 2 bytes = 33 554 432 bytes at every context
  for (const auto& r : rows) EXPECT_DOUBLE_EQ(r.state_bytes, 32.0 * 32 * 128 * 128 * 2);
  // cache: 2 x 8 x 128 x 2 bytes per token and layer, x 32 layers: 131 072 bytes per token
  EXPECT_DOUBLE_EQ(rows[1].kv_cache_bytes, 131072.0 * 4096);
  EXPECT_DOUBLE_EQ(rows[2].kv_cache_bytes, 131072.0 * (1 << 20));  // 137 GB at a million tokens
  // they meet at h d_h / (2 g) = 32 x 128 / 16 = 256 tokens
  EXPECT_DOUBLE_EQ(break_even_context(llama), 256.0);
  EXPECT_DOUBLE_EQ(rows[0].kv_cache_bytes, rows[0].state_bytes);
  // with the normaliser: h d_k (d_v + 1)
  EXPECT_DOUBLE_EQ(linear_state_bytes_per_layer(2, 3, 5, true, DType::fp32), 2.0 * 3 * 6 * 4);
  EXPECT_TRUE(throws_error_naming([] { linear_state_bytes_per_layer(0, 3, 5, false, DType::fp32); },
                                  {"linear_state_bytes_per_layer", "heads"}));
}

}  // namespace
}  // namespace tvlab::analysis
