// Chapter 04 suites over every implementation: the online softmax against the two-pass softmax
// for any block size, flash attention's forward pass against chapter 00's double-precision
// attention oracle (output and log-sum-exp) for any tiling, causal tile skipping, bad input.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "../common/attention_oracle.hpp"
#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "flash_case.hpp"
#include "backends.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::ch04 {
namespace {

using tvlab::testing::matches;
using tvlab::testing::throws_error_naming;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// ------------------------------------------------------------------------------ online softmax

class OnlineSoftmax : public ::testing::TestWithParam<Backend> {};

TEST_P(OnlineSoftmax, equals_the_two_pass_softmax_for_every_block_size) {
  const Backend& impl = GetParam();
  Rng rng(3);
  Tensor2 x = rng.normal_matrix(5, 37, 0, 3);
  x(0, 11) = 40.0f;                            // an outlier: the running maximum jumps mid-row
  x(1, 0) = kNegInf;                            // masked entries
  x(1, 36) = kNegInf;
  for (std::size_t j = 0; j < 37; ++j) x(2, j) = kNegInf;  // a fully masked row: zeros
  for (std::size_t j = 0; j < 37; ++j) x(3, j) = 1e4f - static_cast<float>(j);  // large, decreasing
  const DTensor2 expected = testing::softmax_oracle(x);
  // A float implementation forms e^{x - m} from a float argument: its rounding, eps |x - m|,
  // becomes a relative error of the weight; plus one rounding of the result and of 1/l. Hence
  // rtol = 2 eps (1 + max |x - m|) over the unmasked entries (46 here: rtol about 1.1e-5).
  double spread = 0;
  for (std::size_t i = 0; i < 5; ++i) {
    const float m = xt::amax(xt::view(x, i, xt::all()))();
    for (std::size_t j = 0; j < 37; ++j)
      if (std::isfinite(x(i, j))) spread = std::max(spread, static_cast<double>(m) - x(i, j));
  }
  const double rtol = 2 * 1.2e-7 * (1 + spread);
  for (std::size_t block : {1UL, 2UL, 3UL, 7UL, 16UL, 36UL, 37UL, 100UL}) {
    EXPECT_TRUE(matches(impl.online_softmax(x, block), expected, {1e-12, rtol},
                        {"online_softmax, block " + std::to_string(block), {"row", "col"}, 3, "",
                         "rescale the running sum by e^{m - m'} whenever the maximum grows"}));
  }
}

TEST_P(OnlineSoftmax, rejects_bad_input_naming_the_parameter) {
  const Backend& impl = GetParam();
  Tensor2 x = xt::zeros<float>({2, 4});
  EXPECT_TRUE(throws_error_naming([&] { impl.online_softmax(x, 0); }, {"online_softmax", "block"}));
  x(1, 2) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { impl.online_softmax(x, 2); }, {"online_softmax", "x"}));
  x(1, 2) = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws_error_naming([&] { impl.online_softmax(x, 2); }, {"online_softmax", "x"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.online_softmax(Tensor2::from_shape({0, 4}), 2); }, {"online_softmax", "x"}));
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OnlineSoftmax);  // not an exercise
INSTANTIATE_TEST_SUITE_P(Ch04, OnlineSoftmax,
                         ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::online_softmax)),
                         tvlab::testing::ImplName());

class SoftmaxMerge : public ::testing::TestWithParam<Backend> {};

// m and l of a whole row in one pass, in double: the definition.
ref::SoftmaxState direct_state(const std::vector<float>& x) {
  double m = -std::numeric_limits<double>::infinity(), l = 0;
  for (float v : x) m = std::max(m, static_cast<double>(v));
  if (m == -std::numeric_limits<double>::infinity()) return {};
  for (float v : x) l += std::exp(static_cast<double>(v) - m);
  return {m, l};
}

TEST_P(SoftmaxMerge, merging_the_states_of_any_split_gives_the_state_of_the_whole) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "04.1");
  Rng rng(4);
  std::vector<float> x(50);
  for (auto& v : x) v = static_cast<float>(rng.normal() * 4);
  x[31] = 25.0f;  // the maximum sits in the right part for most splits
  x[7] = kNegInf;
  const ref::SoftmaxState whole = direct_state(x);
  for (std::size_t split = 0; split <= x.size(); ++split) {
    const ref::SoftmaxState a = direct_state({x.begin(), x.begin() + static_cast<std::ptrdiff_t>(split)});
    const ref::SoftmaxState b = direct_state({x.begin() + static_cast<std::ptrdiff_t>(split), x.end()});
    for (const ref::SoftmaxState merged : {impl.softmax_merge(a, b), impl.softmax_merge(b, a)}) {
      EXPECT_EQ(merged.max, whole.max) << "a row of 50 split after " << split
                                       << " entries: the merged maximum is $m = \\max(m_a, m_b)$";
      EXPECT_NEAR(merged.sum, whole.sum, 1e-14 * whole.sum)
          << "a row of 50 split after " << split << " entries ($m_a$ = " << a.max << ", $m_b$ = " << b.max
          << "): $l = l_a e^{m_a - m} + l_b e^{m_b - m}$, each sum moved to the new maximum; a part with "
          << "$m = -\\infty$ (empty, or all -inf) contributes 0, not NaN";
    }
  }
  // The empty state (-inf, 0) is the identity, and two empty states merge without NaN.
  const ref::SoftmaxState with_empty = impl.softmax_merge(whole, {});
  EXPECT_EQ(with_empty.max, whole.max) << "merge(s, empty state (-inf, 0)) must return s: the maximum";
  EXPECT_NEAR(with_empty.sum, whole.sum, 1e-14 * whole.sum)
      << "merge(s, empty state (-inf, 0)) must return s: the sum ($e^{-\\infty - m} = 0$)";
  const ref::SoftmaxState nothing = impl.softmax_merge({}, {});
  EXPECT_EQ(nothing.sum, 0.0) << "merge of two empty states (-inf, 0): $-\\infty - (-\\infty)$ is NaN, so an "
                                 "empty part must be skipped, not rescaled";
  EXPECT_FALSE(std::isnan(nothing.sum)) << "merge of two empty states (-inf, 0) must not give NaN";
}

INSTANTIATE_TEST_SUITE_P(Ch04, SoftmaxMerge,
                         ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::softmax_merge)),
                         tvlab::testing::ImplName());

// ------------------------------------------------------------------------------ IO: tile sizes

class BestTiles : public ::testing::TestWithParam<Backend> {};

TEST_P(BestTiles, the_chosen_tiles_fit_and_no_other_tiles_move_less) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "04.3");
  for (const auto& [n, d, sram] : {std::tuple<std::size_t, std::size_t, std::size_t>{64, 8, 1000}, {100, 16, 4096},
                                   {37, 4, 300}, {128, 32, 20000}}) {
    // Brute force over every (B_r, B_c) in [1, n]^2 that fits.
    double best = std::numeric_limits<double>::infinity();
    std::size_t best_r = 0;
    for (std::size_t br = 1; br <= n; ++br)
      for (std::size_t bc = 1; bc <= n; ++bc) {
        if (analysis::flash_tile_floats(d, br, bc) > sram) continue;
        const double total = analysis::flash_attention_io(n, d, br, bc).total();
        if (total < best || (total == best && br > best_r)) {
          best = total;
          best_r = br;
        }
      }
    const analysis::FlashTiles got = impl.best_tiles(n, d, sram);
    const std::string where = "n " + std::to_string(n) + ", d " + std::to_string(d) + ", M " + std::to_string(sram);
    const std::string chosen = " (returned B_r " + std::to_string(got.block_r) + ", B_c " + std::to_string(got.block_c) + ")";
    EXPECT_LE(analysis::flash_tile_floats(d, got.block_r, got.block_c), sram)
        << where << chosen << ": the tiles must fit in M floats (analysis::flash_tile_floats)";
    EXPECT_EQ(analysis::flash_attention_io(n, d, got.block_r, got.block_c).total(), best)
        << where << chosen << ": some tiles that fit move fewer elements; try every (B_r, B_c) in $[1, n]^2$ that fits "
        << "and keep the least analysis::flash_attention_io(n, d, B_r, B_c).total()";
    EXPECT_EQ(got.block_r, best_r) << where << chosen << ": among the tiles that move the fewest elements, return the "
                                   << "largest B_r (here " << best_r << ")";
    EXPECT_EQ(got.io.total(), best) << where << chosen << ": io must be the traffic of the returned tiles";
  }
  EXPECT_TRUE(throws_error_naming([&] { impl.best_tiles(64, 8, 10); }, {"best_flash_tiles", "sram_floats"}))
      << "n 64, d 8, M 10: no tile fits in 10 floats";
}

INSTANTIATE_TEST_SUITE_P(Ch04, BestTiles, ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::best_tiles)),
                         tvlab::testing::ImplName());

// ------------------------------------------------------------------------------ flash forward

class Flash : public ::testing::TestWithParam<Backend> {};

const FlashCase kCases[] = {
    {"one token", 1, 1, 1, 8, 8, true, 64, 64},
    {"seq 129 (not a multiple of the tile), causal", 2, 129, 129, 64, 64, true, 64, 64},
    {"seq 100, tiles 32 x 48", 2, 100, 100, 64, 64, false, 32, 48},
    {"37 queries over 53 keys, head_dim 256, causal", 1, 37, 53, 256, 256, true, 16, 16},
    {"seq 128, exact tiles", 3, 128, 128, 128, 128, true, 64, 64},
    {"5 queries over 300 keys, block_k 7, head_dim_v 24", 2, 5, 300, 16, 24, false, 4, 7},
    {"tiles of one row and one key", 1, 9, 9, 4, 4, true, 1, 1},
    // (opt::flash_attention_backward_v4 works this one in tiles of 64: one [rows, d] operand in half of L1)
    {"seq 150, head_dim 96, tiles 128 x 128", 1, 150, 150, 96, 96, true, 128, 128},
    // (and this one in tiles of 64, leaving last tiles of 3 queries and 3 keys)
    {"seq 67, head_dim 192, tiles 128 x 128", 2, 67, 67, 192, 192, false, 128, 128},
};

// The same scores as a chapter 00 attention: the scale and the mask of cfg.
AttentionConfig same_attention(const FlashConfig& cfg) { return {cfg.scale, cfg.mask}; }

// ln sum_j e^{S_ij} in double, with the mask (chapter 00's oracle scores); -inf for a row that sees no key.
DTensor2 lse_oracle(const Tensor3& q, const Tensor3& k, const FlashConfig& cfg) {
  const std::size_t heads = q.shape()[0], nq = q.shape()[1], nk = k.shape()[1];
  DTensor2 lse = DTensor2::from_shape({heads, nq});
  for (std::size_t h = 0; h < heads; ++h) {
    const DTensor2 s = testing::masked_scores_oracle(q, k, same_attention(cfg), h);
    for (std::size_t i = 0; i < nq; ++i) {
      double m = -std::numeric_limits<double>::infinity(), sum = 0;
      for (std::size_t j = 0; j < nk; ++j) m = std::max(m, s(i, j));
      if (m == -std::numeric_limits<double>::infinity()) {
        lse(h, i) = m;
        continue;
      }
      for (std::size_t j = 0; j < nk; ++j) sum += std::exp(s(i, j) - m);
      lse(h, i) = m + std::log(sum);
    }
  }
  return lse;
}

// out and lse of a forward pass against the double oracle. As in chapter 00: a score's float
// error is at most rtol M (M = max_ij scale sum |q k| plus the bias terms, score_magnitude), which
// moves an output by at most 2 rtol M max|v|, and P V adds rtol max|v| (tvlab::attention_tolerance,
// rtol = 10 eps sqrt(K), K = max(d, seq_k)); L_i = m_i + ln l_i moves by at most the score error.
void expect_forward_matches(const FlashOutput& got, const Tensor3& q, const Tensor3& k, const Tensor3& v,
                            const FlashConfig& cfg, const std::string& label, std::uint64_t seed,
                            const std::string& out_hint, const std::string& lse_hint) {
  const AttentionConfig same = same_attention(cfg);
  const std::size_t head_dim = q.shape()[2], seq_k = k.shape()[1];
  const double rtol = tvlab::testing::reduction_rtol(std::max(head_dim, seq_k));
  const double magnitude = testing::score_magnitude(q, k, same);
  const double atol = attention_tolerance(head_dim, seq_k, magnitude, xt::amax(xt::abs(v))());
  EXPECT_TRUE(matches(got.out, testing::sdpa_oracle(q, k, v, same), {atol, rtol},
                      {"flash_attention_forward, " + label, {"h", "i", "d"}, seed, "", out_hint}));
  EXPECT_TRUE(matches(got.lse, lse_oracle(q, k, cfg), {rtol * (magnitude + 1), 0.0},
                      {"log-sum-exp, " + label, {"h", "i"}, seed, "", lse_hint}));
}

TEST_P(Flash, forward_matches_the_attention_oracle_and_its_log_sum_exp) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "04.2");
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  for (const FlashCase& c : kCases) {
    const std::uint64_t seed = 100 + c.seq_k;
    Rng rng(seed);
    const Tensor3 q = rng.normal_tensor(c.heads, c.seq_q, c.head_dim), k = rng.normal_tensor(c.heads, c.seq_k, c.head_dim);
    const Tensor3 v = rng.normal_tensor(c.heads, c.seq_k, c.head_dim_v);
    FlashConfig cfg;
    cfg.mask.causal = c.causal;
    cfg.block_q = c.block_q;
    cfg.block_k = c.block_k;
    const std::string tiles = ", tiles " + std::to_string(c.block_q) + " x " + std::to_string(c.block_k);
    expect_forward_matches(impl.flash_forward(q, k, v, cfg), q, k, v, cfg, c.label + tiles, seed,
                           "for each key tile, with $s_{ij} = q_i \\cdot k_j / \\sqrt{d}$: "
                           "$m' = \\max(m, \\max_j s_{ij})$, $l' = e^{m - m'} l + \\sum_j e^{s_{ij} - m'}$, "
                           "$O' = e^{m - m'} O + \\sum_j e^{s_{ij} - m'} v_j$ (rescale both l and O when the maximum "
                           "grows), and $O / l$ after the last tile" +
                               std::string(c.causal ? "; causal: key j counts when $j \\le i + \\text{seq\\_k} - "
                                                      "\\text{seq\\_q}$, also inside a partly hidden tile"
                                                    : ""),
                           "the log-sum-exp of row i is $L_i = m_i + \\ln l_i$ after the last tile, not $\\ln l_i$ alone");
  }
}

TEST_P(Flash, tile_sizes_change_the_order_of_the_arithmetic_not_the_result) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "04.2");
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  Rng rng(8);
  const Tensor3 q = rng.normal_tensor(2, 70, 32), k = rng.normal_tensor(2, 70, 32), v = rng.normal_tensor(2, 70, 32);
  FlashConfig whole;
  whole.mask.causal = true;
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
                         {"h", "i", "d"}, 8, "",
                         "the tiles only change the order of the sums: a result that depends on the tile size loses "
                         "a rescaling $e^{m - m'}$ between tiles, or mishandles the last tile when 70 is not a "
                         "multiple of the tile size (" + std::to_string(70 % bq) + " rows, " + std::to_string(70 % bk) +
                             " keys left over here)"}));
  }
}

TEST_P(Flash, causal_attention_skips_the_tiles_above_the_diagonal) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "04.2");
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  if (!impl.limits.tiles_keys) GTEST_SKIP() << impl.name << " does not loop over key tiles: no tiles to count";
  Rng rng(9);
  const Tensor3 x = rng.normal_tensor(1, 256, 16);
  FlashConfig cfg;
  cfg.block_q = cfg.block_k = 64;
  cfg.mask.causal = true;
  // 4 x 4 tiles: query tile t sees key tiles 0 .. t, so 4 + 3 + 2 + 1 = 10 are computed, 6 skipped.
  const FlashOutput causal = impl.flash_forward(x, x, x, cfg);
  EXPECT_EQ(causal.tiles_computed, 10U) << "causal, seq 256, tiles 64 x 64: query tile t needs key tiles 0..t, 10 of 16";
  EXPECT_EQ(causal.tiles_skipped, 6U) << "causal, seq 256, tiles 64 x 64: the 6 tiles above the diagonal are skipped";
  cfg.mask.causal = false;
  const FlashOutput full = impl.flash_forward(x, x, x, cfg);
  EXPECT_EQ(full.tiles_computed, 16U) << "no mask, seq 256, tiles 64 x 64: every one of the 4 x 4 tiles is computed";
  EXPECT_EQ(full.tiles_skipped, 0U) << "no mask: no tile may be skipped";
  // 100 queries over 300 keys (queries are the last 100 positions), tiles of 64: query tile 0
  // (rows 0..63) sees keys up to 263, i.e. key tiles 0..4 of 5; query tile 1 sees all 5.
  const Tensor3 q = rng.normal_tensor(1, 100, 16), k = rng.normal_tensor(1, 300, 16);
  cfg.mask.causal = true;
  const FlashOutput shifted = impl.flash_forward(q, k, k, cfg);
  EXPECT_EQ(shifted.tiles_computed, 10U)
      << "causal, 100 queries over 300 keys, tiles 64: query i sits at i + 200, so query tile 0 (rows 0..63) already "
         "sees keys up to 263, in key tile 4 of 5: all 10 tiles";
  EXPECT_EQ(shifted.tiles_skipped, 0U) << "causal, 100 queries over 300 keys, tiles 64: nothing is hidden";
  cfg.block_k = 32;  // key tiles of 32: tile 0 sees tiles 0..8 of 10 (key 263 is in tile 8)
  const FlashOutput finer = impl.flash_forward(q, k, k, cfg);
  EXPECT_EQ(finer.tiles_computed, 19U)
      << "causal, 100 queries over 300 keys, tiles 64 x 32: query tile 0 sees key tiles 0..8 (key 263 is in tile 8)";
  EXPECT_EQ(finer.tiles_skipped, 1U) << "causal, 100 queries over 300 keys, tiles 64 x 32: key tile 9 is hidden from "
                                        "query tile 0";
}

// ------------------------------------------------------------- flash with the mask specification

// A case of AttentionMask for flash attention: the structural parts, the explicit ones (drawn from
// the seed), and tiles that do not divide the sequences.
struct FlashMaskCase {
  std::string label;
  std::size_t heads, seq_q, seq_k, head_dim;
  bool causal;
  CausalAlign align;
  std::optional<SlidingWindow> window;
  std::size_t block_q, block_k;
  bool boolean = false, bias = false, alibi = false;
};

const FlashMaskCase kMaskCases[] = {
    {"causal window of 16 keys, seq 100, tiles 16 x 8", 2, 100, 100, 16, true, CausalAlign::bottom_right,
     SlidingWindow{15, 0}, 16, 8},
    {"two-sided window 5 + 9, 37 queries over 53 keys, tiles 8 x 16", 2, 37, 53, 16, false, CausalAlign::bottom_right,
     SlidingWindow{5, 9}, 8, 16},
    {"top-left causal, 40 queries over 70 keys, tiles 16 x 16", 2, 40, 70, 16, true, CausalAlign::top_left, std::nullopt,
     16, 16},
    {"top-left causal, 70 queries over 40 keys, tiles 16 x 16", 2, 70, 40, 16, true, CausalAlign::top_left, std::nullopt,
     16, 16},
    {"top-left window 3 + 2, 30 queries over 12 keys (the last rows see nothing), tiles 8 x 4", 1, 30, 12, 8, false,
     CausalAlign::top_left, SlidingWindow{3, 2}, 8, 4},
    {"boolean mask, causal, 33 x 33, tiles 8 x 8", 2, 33, 33, 16, true, CausalAlign::bottom_right, std::nullopt, 8, 8,
     true},
    {"ALiBi, 24 queries over 48 keys, tiles 8 x 16", 4, 24, 48, 16, false, CausalAlign::bottom_right, std::nullopt, 8, 16,
     false, false, true},
    {"bias with -inf, window 6 + 6, 29 x 31, tiles 4 x 8", 2, 29, 31, 16, false, CausalAlign::bottom_right,
     SlidingWindow{6, 6}, 4, 8, false, true},
};

FlashConfig make_masked_config(const FlashMaskCase& c, Rng& rng) {
  FlashConfig cfg;
  cfg.block_q = c.block_q;
  cfg.block_k = c.block_k;
  cfg.mask.causal = c.causal;
  cfg.mask.causal_align = c.align;
  cfg.mask.window = c.window;
  if (c.boolean) {
    Mask2 allowed = Mask2::from_shape({c.seq_q, c.seq_k});
    for (auto& a : allowed) a = rng.uniform() < 0.75;
    for (std::size_t j = 0; j < c.seq_k; ++j) allowed(c.seq_q / 2, j) = false;  // a row that sees nothing
    cfg.mask.allowed = allowed;
  }
  if (c.bias) {
    Tensor2 bias = rng.normal_matrix(c.seq_q, c.seq_k);
    for (std::size_t i = 0; i < c.seq_q; ++i) bias(i, (3 * i) % c.seq_k) = kNegInf;
    cfg.mask.bias = bias;
  }
  if (c.alibi) {
    DTensor1 slopes = DTensor1::from_shape({c.heads});
    for (std::size_t h = 0; h < c.heads; ++h) slopes(h) = std::pow(2.0, -static_cast<double>(h + 1));
    cfg.mask.alibi_slopes = slopes;
  }
  return cfg;
}

TEST_P(Flash, masks_match_the_oracle_or_are_refused_naming_the_part) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "04.2");
  for (const FlashMaskCase& c : kMaskCases) {
    const std::uint64_t seed = 700 + c.seq_q * 3 + c.seq_k;
    Rng rng(seed);
    const Tensor3 q = rng.normal_tensor(c.heads, c.seq_q, c.head_dim), k = rng.normal_tensor(c.heads, c.seq_k, c.head_dim);
    const Tensor3 v = rng.normal_tensor(c.heads, c.seq_k, c.head_dim);
    const FlashConfig cfg = make_masked_config(c, rng);
    const std::string missing = testing::first_unsupported_part(cfg.mask, impl.caps.masks);
    if (!missing.empty()) {  // refused before any device work: runs without a GPU too
      EXPECT_TRUE(throws_error_naming([&] { impl.flash_forward(q, k, v, cfg); },
                                      {"flash_attention_forward", "mask." + missing, "not supported"}))
          << c.label;
      continue;
    }
    if (unavailable_reason(impl.caps)) continue;
    expect_forward_matches(impl.flash_forward(q, k, v, cfg), q, k, v, cfg, c.label, seed,
                           "a key tile may be skipped only when the mask hides it from every row of the query tile; "
                           "inside a tile, key j counts when cfg.mask.allows(i, j, seq_q, seq_k), and "
                           "cfg.mask.score_bias(h, i, j, seq_q, seq_k) is added to $s_{ij}$",
                           "$L_i = m_i + \\ln l_i$; a row that sees no key has $L_i = -\\infty$ and output 0");
  }
}

// Counts (query tile, key tile) pairs from the definition: a pair is needed when some query of
// the tile may see some key of it under the causal rule and the window.
std::pair<std::size_t, std::size_t> tiles_needed(const AttentionMask& mask, std::size_t seq_q, std::size_t seq_k,
                                                 std::size_t bq, std::size_t bk) {
  std::size_t needed = 0, total = 0;
  for (std::size_t r0 = 0; r0 < seq_q; r0 += bq)
    for (std::size_t c0 = 0; c0 < seq_k; c0 += bk) {
      ++total;
      bool any = false;
      for (std::size_t i = r0; i < std::min(seq_q, r0 + bq) && !any; ++i)
        for (std::size_t j = c0; j < std::min(seq_k, c0 + bk) && !any; ++j) any = testing::mask_allows_oracle(mask, seq_q, seq_k, i, j);
      needed += any ? 1 : 0;
    }
  return {needed, total - needed};
}

TEST_P(Flash, windows_and_top_left_causal_skip_the_key_tiles_they_hide) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "04.2");
  if (impl.name == "cuda_rowwise") GTEST_SKIP() << "one thread per query row: no tiles to count";
  Rng rng(10);
  struct TileCase {
    std::string label;
    std::size_t seq_q, seq_k, bq, bk;
    bool causal;
    CausalAlign align;
    std::optional<SlidingWindow> window;
    std::size_t computed, skipped;  // counted by hand in the comments
  };
  const TileCase cases[] = {
      // Query tile t (rows 32t .. 32t + 31) sees keys 32t - 63 .. 32t + 31: key tiles t - 2, t - 1, t.
      // Tiles 0 and 1 have 1 and 2 of them, tiles 2 .. 7 three each: 21 of 64 computed.
      {"causal window of 64 keys, n 256, tiles 32", 256, 256, 32, 32, true, CausalAlign::bottom_right,
       SlidingWindow{63, 0}, 21, 43},
      // Query tile t (rows 64t .. 64t + 63) sees keys 64t - 16 .. 64t + 79: key tiles t - 1 .. t + 1,
      // clipped: 2 + 3 + 3 + 2 = 10 of 16.
      {"two-sided window 16 + 16, n 256, tiles 64", 256, 256, 64, 64, false, CausalAlign::bottom_right,
       SlidingWindow{16, 16}, 10, 6},
      // Top-left: query i sees keys 0 .. i. Tile 0 (rows 0 .. 63) needs key tile 0 of 5; tile 1
      // (rows 64 .. 99) key tiles 0 and 1: 3 of 10 (bottom-right would compute all 10).
      {"top-left causal, 100 queries over 300 keys, tiles 64", 100, 300, 64, 64, true, CausalAlign::top_left,
       std::nullopt, 3, 7},
      // Window 0 + 0, top-left: query i sees key i only, so rows 40 .. 99 see nothing. Query tile 0
      // needs key tiles 0, 1 (of 16 keys); tile 1 (rows 32 .. 63) key tile 2; tiles 2 and 3 none: 3 of 12.
      {"top-left diagonal window, 100 queries over 40 keys, tiles 32 x 16", 100, 40, 32, 16, false,
       CausalAlign::top_left, SlidingWindow{0, 0}, 3, 9},
  };
  for (const TileCase& c : cases) {
    const Tensor3 q = rng.normal_tensor(1, c.seq_q, 16), k = rng.normal_tensor(1, c.seq_k, 16);
    FlashConfig cfg;
    cfg.block_q = c.bq;
    cfg.block_k = c.bk;
    cfg.mask.causal = c.causal;
    cfg.mask.causal_align = c.align;
    cfg.mask.window = c.window;
    const auto [needed, hidden] = tiles_needed(cfg.mask, c.seq_q, c.seq_k, c.bq, c.bk);
    ASSERT_EQ(needed, c.computed) << c.label << ": the hand count disagrees with the definition";
    ASSERT_EQ(hidden, c.skipped) << c.label;
    const std::string missing = testing::first_unsupported_part(cfg.mask, impl.caps.masks);
    if (!missing.empty()) {
      EXPECT_TRUE(throws_error_naming([&] { impl.flash_forward(q, k, k, cfg); }, {"mask." + missing})) << c.label;
      continue;
    }
    if (unavailable_reason(impl.caps)) continue;
    const FlashOutput r = impl.flash_forward(q, k, k, cfg);
    EXPECT_EQ(r.tiles_computed, c.computed)
        << c.label << ": a key tile is computed when some query of the query tile may see some key of it";
    EXPECT_EQ(r.tiles_skipped, c.skipped)
        << c.label << ": a key tile is skipped when the causal rule and the window hide it from every query of the tile";
  }
}

TEST_P(Flash, rejects_bad_input_naming_the_parameter) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "04.2");
  const Tensor3 x = xt::ones<float>({1, 4, 8});
  FlashConfig cfg;
  cfg.block_q = 0;
  EXPECT_TRUE(throws_error_naming([&] { impl.flash_forward(x, x, x, cfg); }, {"flash_attention_forward", "block_q"}))
      << "cfg.block_q 0";
  cfg = {};
  cfg.block_k = 0;
  EXPECT_TRUE(throws_error_naming([&] { impl.flash_forward(x, x, x, cfg); }, {"block_k"})) << "cfg.block_k 0";
  const Tensor3 wide = xt::ones<float>({1, 4, 264});
  EXPECT_TRUE(throws_error_naming([&] { impl.flash_forward(wide, wide, x, {}); }, {"head_dim", "256"})) << "q, k of head_dim 264 (above 256)";
  EXPECT_TRUE(throws_error_naming([&] { impl.flash_forward(x, x, wide, {}); }, {"head_dim_v", "256"})) << "v of head_dim_v 264 (above 256)";
  cfg = {};
  cfg.mask.causal = true;
  const Tensor3 short_k = xt::ones<float>({1, 2, 8});
  EXPECT_TRUE(throws_error_naming([&] { impl.flash_forward(x, short_k, short_k, cfg); }, {"seq_q", "seq_k"}))
      << "causal with 4 queries over 2 keys: the first queries would see no key";
  Tensor3 bad = x;
  bad(0, 2, 5) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { impl.flash_forward(bad, x, x, {}); }, {"q"})) << "q with NaN at (0, 2, 5)";
  if (const std::size_t limit = impl.limits.max_tile_rows) {  // one thread per row of a tile
    const Tensor3 long_x = xt::ones<float>({std::size_t{1}, limit + 76, std::size_t{8}});
    cfg = {};
    cfg.block_q = 2 * limit;
    EXPECT_TRUE(throws_error_naming([&] { impl.flash_forward(long_x, long_x, long_x, cfg); },
                                    {"block_q", std::to_string(limit)}));
  }
  // FP8 and 16-bit inputs are emulated by the reference alone; the others say so.
  if (!impl.caps.low_precision_inputs) {
    cfg = {};
    cfg.fp8 = Fp8Scaling::per_block;
    EXPECT_TRUE(throws_error_naming([&] { impl.flash_forward(x, x, x, cfg); }, {"cfg.fp8"}));
    cfg = {};
    cfg.inputs = FlashInputs::fp16;  // so is the emulation of 16-bit inputs (the tensor-core kernel has its own tests)
    EXPECT_TRUE(throws_error_naming([&] { impl.flash_forward(x, x, x, cfg); }, {"cfg.inputs"}));
  }
}

// Every forward pass that takes fp32 inputs (the tensor-core kernel has its own tests).
std::vector<Backend> fp32_forward_passes() {
  std::vector<Backend> out;
  for (const auto& b : tvlab::testing::under_test(backends(), &Backend::flash_forward))
    if (!b.limits.sixteen_bit_only) out.push_back(b);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Ch04, Flash, ::testing::ValuesIn(fp32_forward_passes()),
                         tvlab::testing::ImplName());

// ------------------------------------------------------------------------------ flash backward

class FlashBackward : public ::testing::TestWithParam<Backend> {};

// Gradients of L = sum dO o O through the full matrices, in double, independent of any tiling:
// P = softmax(S), dV = P^T dO, dP = dO V^T, dS = P o (dP - rowsum(dP o P)), dQ = scale dS K,
// dK = scale dS^T Q.
struct DoubleGrads {
  DTensor3 dq, dk, dv;
};

DoubleGrads gradient_oracle(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor3& dout,
                            const AttentionConfig& cfg) {
  const std::size_t heads = q.shape()[0], nq = q.shape()[1], nk = k.shape()[1], d = q.shape()[2], dv = v.shape()[2];
  const double scale = cfg.scale.value_or(1.0 / std::sqrt(static_cast<double>(d)));
  DoubleGrads g{xt::zeros<double>({heads, nq, d}), xt::zeros<double>({heads, nk, d}), xt::zeros<double>({heads, nk, dv})};
  for (std::size_t h = 0; h < heads; ++h) {
    const DTensor2 s = testing::masked_scores_oracle(q, k, cfg, h);  // -inf where the mask hides a key
    for (std::size_t i = 0; i < nq; ++i) {
      std::vector<double> p(nk, 0.0), dp(nk, 0.0);
      double m = -std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j < nk; ++j) m = std::max(m, s(i, j));
      if (m == -std::numeric_limits<double>::infinity()) continue;  // sees no key: no gradient
      double l = 0;
      for (std::size_t j = 0; j < nk; ++j) l += std::exp(s(i, j) - m);
      double weighted = 0;  // rowsum(dP o P)
      for (std::size_t j = 0; j < nk; ++j) {
        p[j] = std::exp(s(i, j) - m) / l;
        for (std::size_t c = 0; c < dv; ++c) dp[j] += static_cast<double>(dout(h, i, c)) * v(h, j, c);
        weighted += dp[j] * p[j];
      }
      for (std::size_t j = 0; j < nk; ++j) {
        const double ds = p[j] * (dp[j] - weighted);
        for (std::size_t c = 0; c < dv; ++c) g.dv(h, j, c) += p[j] * dout(h, i, c);
        for (std::size_t c = 0; c < d; ++c) {
          g.dq(h, i, c) += scale * ds * k(h, j, c);
          g.dk(h, j, c) += scale * ds * q(h, i, c);
        }
      }
    }
  }
  return g;
}

// dq, dk, dv against the double oracle. Each gradient is a sum over up to K terms (K the largest
// of head_dim, seq_k, seq_q) of products of O(1) values whose inputs (out, lse) carry float
// rounding: rtol = 10 eps sqrt(K), atol = rtol times the largest magnitude of the gradient
// (cancellation in dS = P (dP - D) makes relative error meaningless near zero).
void expect_gradients_match(const FlashGrads& got, const DoubleGrads& want, std::size_t k, const std::string& label,
                            std::uint64_t seed, const std::string& hint) {
  const double rtol = tvlab::testing::reduction_rtol(k);
  for (const auto& [name, g, w] : {std::tuple{"dq", &got.dq, &want.dq}, {"dk", &got.dk, &want.dk}, {"dv", &got.dv, &want.dv}}) {
    const double size = std::max(1.0, static_cast<double>(xt::amax(xt::abs(*w))()));
    EXPECT_TRUE(matches(*g, *w, {10 * rtol * size, rtol},
                        {std::string("flash_attention_backward ") + name + ", " + label, {"h", "i", "d"}, seed, "", hint}));
  }
}

TEST_P(FlashBackward, matches_the_gradient_of_attention_through_the_full_matrices) {
  const Backend& impl = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  for (const FlashCase& c : kCases) {
    if (c.head_dim > 192) continue;  // keeps the double oracle (O(n_q n_k d) per head) quick
    const std::uint64_t seed = 300 + c.seq_k;
    Rng rng(seed);
    const Tensor3 q = rng.normal_tensor(c.heads, c.seq_q, c.head_dim), k = rng.normal_tensor(c.heads, c.seq_k, c.head_dim);
    const Tensor3 v = rng.normal_tensor(c.heads, c.seq_k, c.head_dim_v), dout = rng.normal_tensor(c.heads, c.seq_q, c.head_dim_v);
    FlashConfig cfg;
    cfg.mask.causal = c.causal;
    cfg.block_q = c.block_q;
    cfg.block_k = c.block_k;
    // The forward pass of the reference supplies out and lse (the backward's inputs).
    const FlashOutput fwd = reference_backend(backends()).flash_forward(q, k, v, cfg);
    const FlashGrads got = impl.flash_backward(q, k, v, fwd.out, fwd.lse, dout, cfg);
    expect_gradients_match(got, gradient_oracle(q, k, v, dout, same_attention(cfg)),
                           std::max({c.head_dim, c.seq_k, c.seq_q}), c.label, seed,
                           "recompute P from the saved log-sum-exp: P = exp(S - L)");
  }
}

TEST_P(FlashBackward, agrees_with_finite_differences_of_the_forward_pass) {
  // L(q, k, v) = sum dO o O, O from chapter 00's double oracle; central differences in double on
  // a few entries of q, k and v, stepping by an exactly representable h.
  const Backend& impl = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  Rng rng(77);
  const Tensor3 q = rng.normal_tensor(2, 9, 8), k = rng.normal_tensor(2, 12, 8), v = rng.normal_tensor(2, 12, 8);
  const Tensor3 dout = rng.normal_tensor(2, 9, 8);
  FlashConfig cfg;
  cfg.mask.causal = true;
  cfg.block_q = 4;
  cfg.block_k = 5;
  const AttentionConfig same = same_attention(cfg);
  const FlashOutput fwd = reference_backend(backends()).flash_forward(q, k, v, cfg);
  const FlashGrads g = impl.flash_backward(q, k, v, fwd.out, fwd.lse, dout, cfg);
  auto loss = [&](const Tensor3& qq, const Tensor3& kk, const Tensor3& vv) {
    const DTensor3 o = testing::sdpa_oracle(qq, kk, vv, same);
    double sum = 0;
    for (std::size_t i = 0; i < o.size(); ++i) sum += o.data()[i] * dout.data()[i];
    return sum;
  };
  const float h = 0x1.0p-10f;
  struct Probe {
    const char* name;
    int which;  // 0 q, 1 k, 2 v
    std::size_t a, b, c;
  };
  for (const Probe& p : {Probe{"dq", 0, 0, 3, 2}, Probe{"dq", 0, 1, 8, 7}, Probe{"dk", 1, 0, 0, 1}, Probe{"dk", 1, 1, 11, 4},
                         Probe{"dv", 2, 0, 5, 0}, Probe{"dv", 2, 1, 2, 6}}) {
    Tensor3 plus[3] = {q, k, v}, minus[3] = {q, k, v};
    plus[p.which](p.a, p.b, p.c) += h;
    minus[p.which](p.a, p.b, p.c) -= h;
    const double numeric = (loss(plus[0], plus[1], plus[2]) - loss(minus[0], minus[1], minus[2])) / (2.0 * h);
    const Tensor3& analytic = p.which == 0 ? g.dq : p.which == 1 ? g.dk : g.dv;
    // Central differences: truncation error O(h^2) ~ 1e-6 times third derivatives of O(1).
    EXPECT_NEAR(analytic(p.a, p.b, p.c), numeric, 1e-4 + 1e-4 * std::fabs(numeric))
        << p.name << "(" << p.a << ", " << p.b << ", " << p.c << ")";
  }
}

TEST_P(FlashBackward, rejects_bad_input_naming_the_parameter) {
  const Backend& impl = GetParam();
  const Tensor3 x = xt::ones<float>({1, 4, 8});
  const Tensor2 lse = xt::zeros<float>({1, 4});
  EXPECT_TRUE(throws_error_naming([&] { impl.flash_backward(x, x, x, x, lse, Tensor3(xt::ones<float>({1, 3, 8})), {}); },
                                  {"flash_attention_backward", "dout"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.flash_backward(x, x, x, Tensor3(xt::ones<float>({1, 4, 6})), lse, x, {}); },
                                  {"out", "head_dim"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.flash_backward(x, x, x, x, Tensor2(xt::zeros<float>({2, 4})), x, {}); },
                                  {"lse", "heads"}));
  Tensor3 bad = x;
  bad(0, 1, 1) = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws_error_naming([&] { impl.flash_backward(x, x, x, x, lse, bad, {}); }, {"dout"}));
  Tensor2 nan_lse = lse;
  nan_lse(0, 2) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { impl.flash_backward(x, x, x, x, nan_lse, x, {}); }, {"lse"}));
  FlashConfig fp8;
  fp8.fp8 = Fp8Scaling::per_tensor;
  EXPECT_TRUE(throws_error_naming([&] { impl.flash_backward(x, x, x, x, lse, x, fp8); }, {"fp8"}));
  if (const std::size_t limit = impl.limits.max_tile_rows) {  // one thread per row of a tile, in both passes
    const Tensor3 long_x = xt::ones<float>({std::size_t{1}, limit + 76, std::size_t{8}});
    const Tensor2 long_lse = xt::zeros<float>({std::size_t{1}, limit + 76});
    FlashConfig cfg;
    cfg.block_k = 2 * limit;
    EXPECT_TRUE(throws_error_naming([&] { impl.flash_backward(long_x, long_x, long_x, long_x, long_lse, long_x, cfg); },
                                    {"block_k", std::to_string(limit)}));
    cfg = {};
    cfg.block_q = 2 * limit;
    EXPECT_TRUE(throws_error_naming([&] { impl.flash_backward(long_x, long_x, long_x, long_x, long_lse, long_x, cfg); },
                                    {"block_q", std::to_string(limit)}));
  }
}

TEST_P(FlashBackward, masks_match_the_gradient_oracle_or_are_refused_naming_the_part) {
  const Backend& impl = GetParam();
  for (const FlashMaskCase& c : kMaskCases) {
    const std::uint64_t seed = 900 + c.seq_q * 3 + c.seq_k;
    Rng rng(seed);
    const Tensor3 q = rng.normal_tensor(c.heads, c.seq_q, c.head_dim), k = rng.normal_tensor(c.heads, c.seq_k, c.head_dim);
    const Tensor3 v = rng.normal_tensor(c.heads, c.seq_k, c.head_dim), dout = rng.normal_tensor(c.heads, c.seq_q, c.head_dim);
    const FlashConfig cfg = make_masked_config(c, rng);
    // The reference's forward pass supplies out and lse (it implements every part).
    const FlashOutput fwd = reference_backend(backends()).flash_forward(q, k, v, cfg);
    const std::string missing = testing::first_unsupported_part(cfg.mask, impl.caps.masks);
    if (!missing.empty()) {
      EXPECT_TRUE(throws_error_naming([&] { impl.flash_backward(q, k, v, fwd.out, fwd.lse, dout, cfg); },
                                      {"flash_attention_backward", "mask." + missing, "not supported"}))
          << c.label;
      continue;
    }
    if (unavailable_reason(impl.caps)) continue;
    const FlashGrads got = impl.flash_backward(q, k, v, fwd.out, fwd.lse, dout, cfg);
    expect_gradients_match(got, gradient_oracle(q, k, v, dout, same_attention(cfg)),
                           std::max({c.head_dim, c.seq_k, c.seq_q}), c.label, seed,
                           "a key tile is hidden from a query tile only when the mask hides all its pairs");
  }
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FlashBackward);
INSTANTIATE_TEST_SUITE_P(Ch04, FlashBackward,
                         ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::flash_backward)),
                         tvlab::testing::ImplName());

}  // namespace
}  // namespace tvlab::ch04
