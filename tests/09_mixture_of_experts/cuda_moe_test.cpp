// Chapter 09's CUDA kernels beyond the registry's suites: the router kernel's own limits, refused
// by name before any device call (so these run everywhere).

#include <gtest/gtest.h>

#include "../common/testing.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/cuda/moe.hpp"

namespace tvlab::moe {
namespace {

using tvlab::testing::throws_error_naming;

TEST(Ch09Cuda, the_router_kernels_limits_are_named_before_any_device_call) {
  Rng rng(940);
  ref::RouterConfig many;
  many.num_experts = 2048, many.top_k = 2;
  EXPECT_TRUE(throws_error_naming([&] { cuda::route_top_k(rng.normal_matrix(2, 2048), many, {}); },
                                  {"route_top_k", "num_experts (2048)", "1024"}));
  ref::RouterConfig groups;
  groups.num_experts = 256, groups.top_k = 2, groups.n_group = 128, groups.topk_group = 2;
  EXPECT_TRUE(throws_error_naming([&] { cuda::route_top_k(rng.normal_matrix(2, 256), groups, {}); }, {"route_top_k", "n_group (128)", "64"}));
}

}  // namespace
}  // namespace tvlab::moe
