// Chapter 09, the load tables of analysis/moe_load.hpp: the drop rate falls as the capacity factor
// grows and is zero once C covers the busiest expert; the skewed router drops more; the
// aux-loss-free bias brings the max/mean load toward 1 while the plain router stays skewed; zero
// logits give P = 1/E, L_aux = 1 and (ln E)^2.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../common/testing.hpp"
#include "tvlab/analysis/moe_load.hpp"

namespace tvlab {
namespace {

using tvlab::testing::throws_error_naming;

TEST(MoeLoad, drop_rate_falls_with_the_capacity_factor) {
  const std::vector<analysis::DropRateRow> rows = analysis::drop_rate_table(4096, {8, 64}, {1, 2}, {0.5, 1.0, 1.25, 1.5, 2.0}, 1.0, 9);
  ASSERT_EQ(rows.size(), 2u * 2 * 2 * 5);
  for (const auto& row : rows) {
    // C = ceil(k N / E * cf), cf a multiple of 1/4 here: ceil(4 k N cf / (4 E)) in integers
    const std::size_t cf4 = std::size_t(std::lround(4.0 * row.capacity_factor));
    EXPECT_EQ(row.capacity, (row.top_k * 4096 * cf4 + 4 * row.num_experts - 1) / (4 * row.num_experts))
        << "the buffer holds the k N assignments";
    // cf 0.5: at least half the assignments cannot fit (C E = k N / 2)
    if (row.capacity_factor == 0.5) {
      EXPECT_GE(row.dropped, 0.5 - 1e-12);
    }
    // no drop once the capacity covers the busiest expert: C >= max/mean * kN/E
    if (double(row.capacity) >= row.max_over_mean * double(row.top_k * 4096) / double(row.num_experts)) {
      EXPECT_EQ(row.dropped, 0.0);
    } else {
      EXPECT_GT(row.dropped, 0.0);
    }
    EXPECT_LE(row.unrouted, row.dropped * double(row.top_k) + 1e-12);
  }
  // monotone in cf within each (data, E, k); skewed >= balanced at every cf
  for (std::size_t i = 0; i + 1 < rows.size(); ++i)
    if (rows[i].data == rows[i + 1].data && rows[i].num_experts == rows[i + 1].num_experts && rows[i].top_k == rows[i + 1].top_k) {
      EXPECT_GE(rows[i].dropped, rows[i + 1].dropped);
    }
  for (std::size_t i = 0; i < rows.size() / 2; ++i) EXPECT_GE(rows[i + rows.size() / 2].dropped, rows[i].dropped);
}

TEST(MoeLoad, the_bias_update_evens_a_skewed_stream) {
  const analysis::BiasBalanceTable table =
      analysis::bias_balance_table(200, 512, 16, 2, {0.001, 0.01}, {0, 1, 5, 10, 25, 50, 100, 150, 199}, 1.0, 9);
  ASSERT_EQ(table.rows.size(), 9u);
  const auto& first = table.rows.front();
  const auto& last = table.rows.back();
  EXPECT_EQ(first.biased[0], first.plain) << "step 0: the bias is still 0";
  EXPECT_GT(last.plain, 1.5) << "the plain router stays skewed";
  EXPECT_LT(last.biased[1], last.plain);
  // the floor is the batch's own noise: 1024 choices, 64 per expert on average (sd about 8), the
  // busiest of 16 about 2 sd above: max/mean near 1.25
  EXPECT_LT(last.biased[1], 1.45) << "gamma 0.01: near balance after 200 steps";
  EXPECT_LT(last.biased[0], last.plain) << "gamma 0.001: on its way";
  EXPECT_GT(last.biased[0], last.biased[1]) << "gamma 0.001 moves each bias by 0.2 at most in 200 steps";
}

// Expert choice is balanced exactly; Sinkhorn's top-1 and quantile thresholds from an earlier batch
// undo the skew (within the sampling noise of a balanced router); plain top-1 keeps it.
TEST(MoeLoad, balanced_routers_undo_the_skew) {
  const std::vector<analysis::RouterBalanceRow> rows = analysis::router_balance_table(4096, {8, 64}, 1.0, 9);
  ASSERT_EQ(rows.size(), 2u * 2 * 4);
  for (std::size_t i = 0; i < rows.size(); i += 4) {
    const auto &top1 = rows[i], &sinkhorn = rows[i + 1], &choice = rows[i + 2], &quantile = rows[i + 3];
    const std::string label = top1.data + ", E " + std::to_string(top1.num_experts);
    EXPECT_EQ(top1.router, "top-1");
    EXPECT_EQ(top1.unrouted, 0.0) << label;
    EXPECT_EQ(choice.max_over_mean, 1.0) << label << ": expert choice is perfectly balanced";
    EXPECT_GT(choice.unrouted, 0.0) << label << ": at c = 1 some tokens are chosen by no expert";
    EXPECT_GT(sinkhorn.iterations, 0u);
    EXPECT_LE(sinkhorn.max_over_mean, top1.max_over_mean + 1e-12) << label;
    // a fresh batch: the busiest expert's share has binomial noise, sd about sqrt(N / E) = 8 tokens
    // at E = 64 (12%), and the busiest of 64 sits 2-3 sd above the mean
    EXPECT_LT(quantile.max_over_mean, 1.6) << label << ": the thresholds carry over to a fresh batch";
    if (top1.data == "skewed") {
      EXPECT_GT(top1.max_over_mean, 3.0) << label;
      // a per-expert logit offset multiplies column e of K = exp(z) by (e + 1)^-s, which the column
      // scaling v absorbs: the plan, hence its routing, is the balanced data's, exactly
      const auto& twin = rows[i + 1 - rows.size() / 2];
      ASSERT_EQ(twin.data, "balanced");
      EXPECT_EQ(sinkhorn.max_over_mean, twin.max_over_mean) << label;
    }
  }
}

TEST(MoeLoad, zero_logits_are_the_balanced_minimum) {
  const analysis::UniformBalance u = analysis::uniform_logits_balance(4096, 8, 2, 1.0, 9);
  for (double p : u.mean_prob) EXPECT_NEAR(p, 1.0 / 8.0, 1e-15);
  EXPECT_NEAR(u.aux_k_normalised, 1.0, 1e-15);
  EXPECT_NEAR(u.aux_mixtral, 2.0, 1e-15);
  // 4096 equal terms summed in double: about N u |L| = 4096 x 1.1e-16 x 4.3 = 2e-12 of round-off
  EXPECT_NEAR(u.z_loss, std::log(8.0) * std::log(8.0), 1e-11);
  EXPECT_GT(u.aux_balanced_router, 1.0);
  EXPECT_GT(u.aux_skewed_router, u.aux_balanced_router);
}

TEST(MoeLoad, bad_input_is_named) {
  EXPECT_TRUE(throws_error_naming([] { analysis::drop_rate_table(0, {8}, {1}, {1.0}, 1.0, 1); }, {"drop_rate_table", "tokens"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::drop_rate_table(64, {8}, {8}, {1.0}, 1.0, 1); }, {"drop_rate_table", "top_k (8)"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::drop_rate_table(64, {8}, {1}, {0.0}, 1.0, 1); }, {"drop_rate_table", "capacity_factor (0)"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::drop_rate_table(64, {}, {1}, {1.0}, 1.0, 1); }, {"drop_rate_table", "num_experts"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::drop_rate_table(64, {8}, {1}, {1.0}, -1.0, 1); }, {"drop_rate_table", "zipf_exponent (-1)"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::bias_balance_table(10, 64, 8, 2, {0.0}, {0}, 1.0, 1); }, {"bias_balance_table", "gamma (0)"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::bias_balance_table(0, 64, 8, 2, {0.1}, {0}, 1.0, 1); }, {"bias_balance_table", "batches"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::router_balance_table(1, {8}, 1.0, 1); }, {"router_balance_table", "tokens (1)"}));
  EXPECT_TRUE(throws_error_naming([] { analysis::uniform_logits_balance(64, 1, 1, 1.0, 1); }, {"uniform_logits_balance", "num_experts (1)"}));
}

}  // namespace
}  // namespace tvlab
