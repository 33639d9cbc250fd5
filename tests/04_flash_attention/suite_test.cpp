// Chapter 04 suites over every implementation: the online softmax against the two-pass softmax
// for any block size, flash attention's forward pass against chapter 00's double-precision
// attention oracle (output and log-sum-exp) for any tiling, causal tile skipping, bad input.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "../00_attention_basics/oracle.hpp"
#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "impls.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::ch04 {
namespace {

using tvlab::testing::matches;
using tvlab::testing::throws_error_naming;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// ------------------------------------------------------------------------------ online softmax

class OnlineSoftmax : public ::testing::TestWithParam<Impl> {};

TEST_P(OnlineSoftmax, equals_the_two_pass_softmax_for_every_block_size) {
  const Impl& impl = GetParam();
  Rng rng(3);
  Tensor2 x = rng.normal_matrix(5, 37, 0, 3);
  x(0, 11) = 40.0f;                            // an outlier: the running maximum jumps mid-row
  x(1, 0) = kNegInf;                            // masked entries
  x(1, 36) = kNegInf;
  for (std::size_t j = 0; j < 37; ++j) x(2, j) = kNegInf;  // a fully masked row: zeros
  for (std::size_t j = 0; j < 37; ++j) x(3, j) = 1e4f - static_cast<float>(j);  // large, decreasing
  const DTensor2 expected = ch00::softmax_oracle(x);
  for (std::size_t block : {1UL, 2UL, 3UL, 7UL, 16UL, 36UL, 37UL, 100UL}) {
    // One rounding of a double result to float: 2 eps relative.
    EXPECT_TRUE(matches(impl.online_softmax(x, block), expected, {1e-12, 2.4e-7},
                        {"online_softmax, block " + std::to_string(block), {"row", "col"}, 3, "",
                         "rescale the running sum by e^{m - m'} whenever the maximum grows"}));
  }
}

TEST_P(OnlineSoftmax, rejects_bad_input_naming_the_parameter) {
  const Impl& impl = GetParam();
  Tensor2 x = xt::zeros<float>({2, 4});
  EXPECT_TRUE(throws_error_naming([&] { impl.online_softmax(x, 0); }, {"online_softmax", "block"}));
  x(1, 2) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { impl.online_softmax(x, 2); }, {"online_softmax", "x"}));
  x(1, 2) = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws_error_naming([&] { impl.online_softmax(x, 2); }, {"online_softmax", "x"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.online_softmax(Tensor2::from_shape({0, 4}), 2); }, {"online_softmax", "x"}));
}

INSTANTIATE_TEST_SUITE_P(Ch04, OnlineSoftmax,
                         ::testing::ValuesIn(tvlab::testing::providing(registry(), &Impl::online_softmax)),
                         tvlab::testing::ImplName());

// ------------------------------------------------------------------------------ flash forward

class Flash : public ::testing::TestWithParam<Impl> {};

struct FlashCase {
  std::string label;
  std::size_t heads, seq_q, seq_k, head_dim, head_dim_v;
  bool causal;
  std::size_t block_q, block_k;
};

const FlashCase kCases[] = {
    {"one token", 1, 1, 1, 8, 8, true, 64, 64},
    {"seq 129 (not a multiple of the tile), causal", 2, 129, 129, 64, 64, true, 64, 64},
    {"seq 100, tiles 32 x 48", 2, 100, 100, 64, 64, false, 32, 48},
    {"37 queries over 53 keys, head_dim 256, causal", 1, 37, 53, 256, 256, true, 16, 16},
    {"seq 128, exact tiles", 3, 128, 128, 128, 128, true, 64, 64},
    {"5 queries over 300 keys, block_k 7, head_dim_v 24", 2, 5, 300, 16, 24, false, 4, 7},
    {"tiles of one row and one key", 1, 9, 9, 4, 4, true, 1, 1},
};

// ln sum_j e^{S_ij} in double, with the causal mask.
DTensor2 lse_oracle(const Tensor3& q, const Tensor3& k, const FlashConfig& cfg) {
  const std::size_t heads = q.shape()[0], nq = q.shape()[1], nk = k.shape()[1], d = q.shape()[2];
  const double scale = cfg.scale.value_or(1.0 / std::sqrt(static_cast<double>(d)));
  DTensor2 lse = DTensor2::from_shape({heads, nq});
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < nq; ++i) {
      std::vector<double> s;
      for (std::size_t j = 0; j < nk; ++j) {
        if (cfg.causal && j + nq > i + nk) continue;
        double dot = 0;
        for (std::size_t c = 0; c < d; ++c) dot += static_cast<double>(q(h, i, c)) * k(h, j, c);
        s.push_back(scale * dot);
      }
      double m = -std::numeric_limits<double>::infinity(), sum = 0;
      for (double x : s) m = std::max(m, x);
      for (double x : s) sum += std::exp(x - m);
      lse(h, i) = m + std::log(sum);
    }
  return lse;
}

TEST_P(Flash, forward_matches_the_attention_oracle_and_its_log_sum_exp) {
  const Impl& impl = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  for (const FlashCase& c : kCases) {
    const std::uint64_t seed = 100 + c.seq_k;
    Rng rng(seed);
    const Tensor3 q = rng.normal_tensor(c.heads, c.seq_q, c.head_dim), k = rng.normal_tensor(c.heads, c.seq_k, c.head_dim);
    const Tensor3 v = rng.normal_tensor(c.heads, c.seq_k, c.head_dim_v);
    FlashConfig cfg;
    cfg.causal = c.causal;
    cfg.block_q = c.block_q;
    cfg.block_k = c.block_k;
    AttentionConfig same;
    same.causal = c.causal;
    const FlashOutput got = impl.flash_forward(q, k, v, cfg);
    // As in chapter 00: rtol = 10 eps sqrt(K), atol = rtol max|v| (2M + 1), K = max(d, seq_k),
    // M = max_ij scale sum |q k| (the size of the terms of a score).
    const double rtol = tvlab::testing::reduction_rtol(std::max(c.head_dim, c.seq_k));
    const double vmax = xt::amax(xt::abs(v))();
    const double magnitude = ch00::score_magnitude(q, k, same);
    EXPECT_TRUE(matches(got.out, ch00::sdpa_oracle(q, k, v, same), {rtol * vmax * (2 * magnitude + 1), rtol},
                        {"flash_attention_forward, " + c.label, {"h", "i", "d"}, seed, "",
                         "rescale both l and the output accumulator by e^{m - m'} when the row maximum grows"}));
    // L_i = m_i + ln l_i: an error delta in the scores moves it by at most delta.
    EXPECT_TRUE(matches(got.lse, lse_oracle(q, k, cfg), {rtol * (magnitude + 1), 0.0},
                        {"log-sum-exp, " + c.label, {"h", "i"}, seed, "", "L = m + ln(l), not ln(l) alone"}));
  }
}

TEST_P(Flash, tile_sizes_change_the_order_of_the_arithmetic_not_the_result) {
  const Impl& impl = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  Rng rng(8);
  const Tensor3 q = rng.normal_tensor(2, 70, 32), k = rng.normal_tensor(2, 70, 32), v = rng.normal_tensor(2, 70, 32);
  FlashConfig whole;
  whole.causal = true;
  whole.block_q = whole.block_k = 1000;  // one tile: the plain softmax
  const FlashOutput reference = impl.flash_forward(q, k, v, whole);
  for (const auto& [bq, bk] : {std::pair<std::size_t, std::size_t>{1, 1}, {7, 5}, {16, 64}, {64, 16}, {70, 70}}) {
    FlashConfig cfg = whole;
    cfg.block_q = bq;
    cfg.block_k = bk;
    const double rtol = tvlab::testing::reduction_rtol(70);
    EXPECT_TRUE(matches(impl.flash_forward(q, k, v, cfg).out, xt::eval(xt::cast<double>(reference.out)), {rtol * 10, rtol},
                        {"flash forward with tiles " + std::to_string(bq) + " x " + std::to_string(bk) +
                             " vs one tile",
                         {"h", "i", "d"}, 8, "", ""}));
  }
}

TEST_P(Flash, causal_attention_skips_the_tiles_above_the_diagonal) {
  const Impl& impl = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  Rng rng(9);
  const Tensor3 x = rng.normal_tensor(1, 256, 16);
  FlashConfig cfg;
  cfg.block_q = cfg.block_k = 64;
  cfg.causal = true;
  // 4 x 4 tiles: query tile t sees key tiles 0 .. t, so 4 + 3 + 2 + 1 = 10 are computed, 6 skipped.
  const FlashOutput causal = impl.flash_forward(x, x, x, cfg);
  EXPECT_EQ(causal.tiles_computed, 10U);
  EXPECT_EQ(causal.tiles_skipped, 6U);
  cfg.causal = false;
  const FlashOutput full = impl.flash_forward(x, x, x, cfg);
  EXPECT_EQ(full.tiles_computed, 16U);
  EXPECT_EQ(full.tiles_skipped, 0U);
}

TEST_P(Flash, rejects_bad_input_naming_the_parameter) {
  const Impl& impl = GetParam();
  const Tensor3 x = xt::ones<float>({1, 4, 8});
  FlashConfig cfg;
  cfg.block_q = 0;
  EXPECT_TRUE(throws_error_naming([&] { impl.flash_forward(x, x, x, cfg); }, {"flash_attention_forward", "block_q"}));
  cfg = {};
  cfg.block_k = 0;
  EXPECT_TRUE(throws_error_naming([&] { impl.flash_forward(x, x, x, cfg); }, {"block_k"}));
  const Tensor3 wide = xt::ones<float>({1, 4, 264});
  EXPECT_TRUE(throws_error_naming([&] { impl.flash_forward(wide, wide, x, {}); }, {"head_dim", "256"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.flash_forward(x, x, wide, {}); }, {"head_dim_v", "256"}));
  cfg = {};
  cfg.causal = true;
  const Tensor3 short_k = xt::ones<float>({1, 2, 8});
  EXPECT_TRUE(throws_error_naming([&] { impl.flash_forward(x, short_k, short_k, cfg); }, {"seq_q", "seq_k"}));
  Tensor3 bad = x;
  bad(0, 2, 5) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { impl.flash_forward(bad, x, x, {}); }, {"q"}));
}

INSTANTIATE_TEST_SUITE_P(Ch04, Flash, ::testing::ValuesIn(tvlab::testing::providing(registry(), &Impl::flash_forward)),
                         tvlab::testing::ImplName());

}  // namespace
}  // namespace tvlab::ch04
