// Chapter 09, expert capacity (exercise 09.2) and the auxiliary-loss-free bias step (exercise
// 09.3) over every backend of the registry that has them: hand-worked cases of Switch's and
// GShard's priorities, the kept assignments against the rule computed here on random routings, the
// bias step's sign rule and its tie, and errors.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <tuple>
#include <vector>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/moe_capacity.hpp"
#include "tvlab/ref/moe_router.hpp"

namespace tvlab::moe {
namespace {

using tvlab::testing::throws_error_naming;

// A routing from a list of (token, expert) pairs, gate 0.1 * (position + 1) so each is recognisable.
Routing routing(std::size_t tokens, std::size_t experts, const std::vector<std::pair<std::size_t, std::size_t>>& pairs) {
  Routing r;
  r.tokens = tokens;
  r.num_experts = experts;
  for (std::size_t a = 0; a < pairs.size(); ++a) {
    r.token.push_back(pairs[a].first);
    r.expert.push_back(pairs[a].second);
    r.gate.push_back(0.1f * float(a + 1));
  }
  return r;
}

using Triple = std::tuple<std::size_t, std::size_t, float>;
std::vector<Triple> triples(const Routing& r) {
  std::vector<Triple> out;
  for (std::size_t a = 0; a < r.size(); ++a) out.emplace_back(r.token[a], r.expert[a], r.gate[a]);
  return out;
}

class Capacity : public ::testing::TestWithParam<Backend> {};

// Switch, top-1, capacity 2: experts [0, 0, 1, 0, 1, 0] for tokens 0..5 keep tokens 0, 1 (expert 0)
// and 2, 4 (expert 1); tokens 3 and 5 are dropped and left with no expert.
TEST_P(Capacity, switch_keeps_the_earlier_tokens) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "09.2");
  const Routing r = routing(6, 2, {{0, 0}, {1, 0}, {2, 1}, {3, 0}, {4, 1}, {5, 0}});
  const Routing kept = backend.apply_capacity(r, 2, ref::CapacityPriority::position);
  EXPECT_EQ(triples(kept), (std::vector<Triple>{{0, 0, 0.1f}, {1, 0, 0.2f}, {2, 1, 0.3f}, {4, 1, 0.5f}}))
      << "kept assignments in the routing's order, gates unchanged";
  EXPECT_EQ(kept.dropped, 2u);
  EXPECT_EQ(kept.tokens, 6u);
  EXPECT_EQ(kept.num_experts, 2u);
  EXPECT_EQ(ref::unrouted_tokens(kept), 2u) << "tokens 3 and 5 lost their only choice";
}

// Top-2, three tokens, two experts, capacity 2. Choices: t0 (0, 1), t1 (1, 0), t2 (0, 1).
// Switch (list order): expert 0 takes t0 and t1's second choice, expert 1 t0's second and t1:
// token 2 loses both. GShard (first choices first): t0 -> 0, t1 -> 1, t2 -> 0, then second
// choices: t0 -> 1 fits, t1 -> 0 and t2 -> 1 do not: every token keeps its first choice.
TEST_P(Capacity, gshard_serves_first_choices_before_second_choices) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "09.2");
  const Routing r = routing(3, 2, {{0, 0}, {0, 1}, {1, 1}, {1, 0}, {2, 0}, {2, 1}});
  const Routing sw = backend.apply_capacity(r, 2, ref::CapacityPriority::position);
  EXPECT_EQ(triples(sw), (std::vector<Triple>{{0, 0, 0.1f}, {0, 1, 0.2f}, {1, 1, 0.3f}, {1, 0, 0.4f}}));
  EXPECT_EQ(sw.dropped, 2u);
  EXPECT_EQ(ref::unrouted_tokens(sw), 1u);
  const Routing gs = backend.apply_capacity(r, 2, ref::CapacityPriority::choice_rank);
  EXPECT_EQ(triples(gs), (std::vector<Triple>{{0, 0, 0.1f}, {0, 1, 0.2f}, {1, 1, 0.3f}, {2, 0, 0.5f}}))
      << "GShard: all first choices (token order) before any second choice; kept in the routing's order";
  EXPECT_EQ(gs.dropped, 2u);
  EXPECT_EQ(ref::unrouted_tokens(gs), 0u);
}

// Random top-k routings: the kept set is, per expert, the first C of its assignments in priority
// order (list order; or (rank, list order)), computed here independently; loads never exceed C;
// the dropped count grows by what was removed, on top of what the routing had already dropped.
TEST_P(Capacity, keeps_the_first_c_of_each_expert_in_priority_order) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "09.2");
  Rng rng(931);
  for (const std::size_t k : {1u, 2u, 3u}) {
    ref::RouterConfig cfg;
    cfg.num_experts = 6;
    cfg.top_k = k;
    Routing r = ref::route_top_k(rng.normal_matrix(37, 6, 0.0, 1.5), cfg);
    r.dropped = 5;  // as if an earlier stage had dropped some
    for (const auto priority : {ref::CapacityPriority::position, ref::CapacityPriority::choice_rank})
      for (const std::size_t capacity : {1u, 4u, 9u, 37u * 3u}) {
        std::vector<std::size_t> order(r.size()), rank(r.size());
        for (std::size_t a = 0; a < r.size(); ++a) rank[a] = a % k;  // route_top_k lists k per token, best first
        std::iota(order.begin(), order.end(), 0);
        if (priority == ref::CapacityPriority::choice_rank)
          std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return rank[a] < rank[b]; });
        std::vector<bool> keep(r.size(), false);
        std::vector<std::size_t> used(6, 0);
        for (std::size_t a : order)
          if (used[r.expert[a]] < capacity) ++used[r.expert[a]], keep[a] = true;
        Routing expected = r;
        expected.token.clear(), expected.expert.clear(), expected.gate.clear();
        for (std::size_t a = 0; a < r.size(); ++a)
          if (keep[a]) expected.token.push_back(r.token[a]), expected.expert.push_back(r.expert[a]), expected.gate.push_back(r.gate[a]);
        const Routing kept = backend.apply_capacity(r, capacity, priority);
        const char* name = priority == ref::CapacityPriority::position ? "position" : "choice_rank";
        EXPECT_EQ(triples(kept), triples(expected)) << "k " << k << ", capacity " << capacity << ", " << name;
        EXPECT_EQ(kept.dropped, 5 + r.size() - expected.size()) << "k " << k << ", capacity " << capacity << ", " << name;
        for (std::size_t l : expert_load(kept)) EXPECT_LE(l, capacity);
      }
  }
}

TEST_P(Capacity, bad_input_is_named) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "09.2");
  const Routing r = routing(3, 2, {{0, 0}, {1, 1}, {2, 0}});
  EXPECT_TRUE(throws_error_naming([&] { backend.apply_capacity(r, 0, ref::CapacityPriority::position); }, {"apply_capacity", "capacity (0)"}));
  Routing bad = r;
  bad.expert[1] = 2;
  EXPECT_TRUE(throws_error_naming([&] { backend.apply_capacity(bad, 1, ref::CapacityPriority::position); }, {"apply_capacity", "expert[1]"}));
  bad = r;
  bad.gate.pop_back();
  EXPECT_TRUE(throws_error_naming([&] { backend.apply_capacity(bad, 1, ref::CapacityPriority::choice_rank); }, {"apply_capacity", "differ"}));
}

INSTANTIATE_TEST_SUITE_P(Ch09, Capacity, ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::apply_capacity)),
                         tvlab::testing::ImplName());

class BiasUpdate : public ::testing::TestWithParam<Backend> {};

// Loads [10, 2, 6, 6] (mean 6): expert 0 overloaded -> b - gamma, expert 1 underloaded -> b + gamma,
// experts 2 and 3 exactly at the mean -> unchanged, bit for bit.
TEST_P(BiasUpdate, overloaded_experts_lower_their_bias_and_a_tie_keeps_it) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "09.3");
  const std::vector<float> bias = {0.25f, -0.5f, 0.125f, 3.0f};
  const std::vector<float> out = backend.update_bias(bias, {10, 2, 6, 6}, 0.001f);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0], 0.25f - 0.001f) << "overloaded: b - gamma";
  EXPECT_EQ(out[1], -0.5f + 0.001f) << "underloaded: b + gamma";
  EXPECT_EQ(out[2], 0.125f) << "load equal to the mean: sign(0) = 0";
  EXPECT_EQ(out[3], 3.0f) << "load equal to the mean: sign(0) = 0";
}

// A mean that is not an integer (loads [3, 4], mean 3.5) has no ties; random loads against
// b + gamma sign(mean - L) computed here (the mean in double, so 7 / 2 is exact).
TEST_P(BiasUpdate, follows_the_sign_of_the_deviation_from_the_mean) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "09.3");
  const std::vector<float> two = backend.update_bias({0.0f, 0.0f}, {3, 4}, 0.01f);
  EXPECT_EQ(two, (std::vector<float>{0.01f, -0.01f}));
  Rng rng(932);
  for (std::size_t trial = 0; trial < 20; ++trial) {
    const std::size_t experts = 1 + trial;
    std::vector<float> bias(experts);
    std::vector<std::size_t> load(experts);
    double total = 0.0;
    for (std::size_t i = 0; i < experts; ++i) {
      bias[i] = float(rng.normal());
      load[i] = std::size_t(rng.uniform() * 8.0);  // small values: ties with the mean happen
      total += double(load[i]);
    }
    const double mean = total / double(experts);
    const std::vector<float> out = backend.update_bias(bias, load, 0.5f);
    ASSERT_EQ(out.size(), experts);
    for (std::size_t i = 0; i < experts; ++i) {
      const float expected = double(load[i]) < mean ? bias[i] + 0.5f : double(load[i]) > mean ? bias[i] - 0.5f : bias[i];
      EXPECT_EQ(out[i], expected) << "trial " << trial << ", expert " << i << ": load " << load[i] << ", mean " << mean;
    }
  }
}

TEST_P(BiasUpdate, bad_input_is_named) {
  const Backend& backend = GetParam();
  TVLAB_EXERCISE(backend, "09.3");
  EXPECT_TRUE(throws_error_naming([&] { backend.update_bias({0.0f, 0.0f}, {1, 2, 3}, 0.1f); }, {"update_bias", "load has 3"}));
  EXPECT_TRUE(throws_error_naming([&] { backend.update_bias({}, {}, 0.1f); }, {"update_bias", "bias"}));
  EXPECT_TRUE(throws_error_naming([&] { backend.update_bias({0.0f}, {1}, 0.0f); }, {"update_bias", "gamma (0)"}));
  EXPECT_TRUE(throws_error_naming([&] { backend.update_bias({0.0f}, {1}, -1.0f); }, {"update_bias", "gamma (-1)"}));
  EXPECT_TRUE(throws_error_naming([&] { backend.update_bias({0.0f}, {1}, std::numeric_limits<float>::quiet_NaN()); },
                                  {"update_bias", "gamma"}));
  EXPECT_TRUE(throws_error_naming([&] { backend.update_bias({std::numeric_limits<float>::infinity()}, {1}, 0.1f); },
                                  {"update_bias", "bias"}));
}

INSTANTIATE_TEST_SUITE_P(Ch09, BiasUpdate, ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::update_bias)),
                         tvlab::testing::ImplName());

}  // namespace
}  // namespace tvlab::moe
