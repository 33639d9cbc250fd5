// Exercises 03.1 and 03.2, which are not attention functions: BigBird's pattern and the receptive
// field of stacked layers, over a registry of two entries (the library's functions and the
// student's). The chapter's test program runs both (the student's being the worked solutions),
// the exercise program the student's alone. Every expected value is computed here from the
// definitions: closed forms, and for the receptive field a product of dense boolean masks.

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "tvlab/analysis/receptive_field.hpp"
#include "tvlab/core/attention_patterns.hpp"
#include "tvlab/student/attention_patterns.hpp"
#include "tvlab/student/receptive_field.hpp"

namespace tvlab::sparse {
namespace {

using tvlab::testing::throws_error_naming;

struct PatternBackend {
  std::string name;
  BackendKind kind = BackendKind::reference;
  Capabilities caps;
  std::function<SparsePattern(std::size_t, std::size_t, std::size_t, std::size_t, std::uint64_t)> bigbird;
  std::function<std::vector<bool>(const std::vector<SparsePattern>&, std::size_t)> receptive_field;
};
void PrintTo(const PatternBackend& b, std::ostream* out) { *out << b.name; }

const std::vector<PatternBackend>& pattern_backends() {
  static const std::vector<PatternBackend> all = {
      {.name = "ref",
       .kind = BackendKind::reference,
       .bigbird = tvlab::bigbird_pattern,
       .receptive_field = analysis::receptive_field},
      {.name = "student",
       .kind = BackendKind::student,
       .bigbird = student::bigbird_pattern,
       .receptive_field = student::receptive_field},
  };
  return all;
}

// "{3, 4, 5}" or "{}" for a failure message; long sets are cut.
std::string set_text(const std::vector<bool>& set) {
  std::string out = "{";
  std::size_t shown = 0;
  for (std::size_t i = 0; i < set.size(); ++i)
    if (set[i]) {
      if (shown == 24) return out + ", ...}";
      out += (shown++ ? ", " : "") + std::to_string(i);
    }
  return out + "}";
}

// ------------------------------------------------------------------------------ 03.1 BigBird

struct BigBirdCase {
  const char* label;
  std::size_t n, block, global_blocks, random_blocks;
  std::uint64_t seed;
};

const BigBirdCase kBigBirdCases[] = {
    {"8 blocks of 8, g = 2, r = 1", 64, 8, 2, 1, 1},
    {"12 blocks of 8, g = 2, r = 3", 96, 8, 2, 3, 7},
    {"12 blocks of 10, one global block, r = 2", 120, 10, 1, 2, 3},
    {"16 blocks of 4, no global block, r = 2", 64, 4, 0, 2, 5},
    {"16 blocks of 16, g = 3, r = 4", 256, 16, 3, 4, 11},
    {"6 blocks of 8, g = 2, no random block", 48, 8, 2, 0, 1},
    {"3 blocks of 8: window and globals cover everything", 24, 8, 2, 0, 1},
};

// The key blocks row `row` attends to, when its keys are whole blocks (an empty set otherwise,
// with `whole` false).
std::set<std::size_t> key_blocks_of_row(const SparsePattern& p, std::size_t row, std::size_t b, bool& whole) {
  std::set<std::size_t> blocks;
  for (std::size_t e = p.row_start[row]; e < p.row_start[row + 1]; ++e) blocks.insert(p.keys[e] / b);
  whole = p.row_size(row) == blocks.size() * b;
  return blocks;
}

std::string blocks_text(const std::set<std::size_t>& blocks) {
  std::string out = "{";
  for (std::size_t kb : blocks) out += (out.size() > 1 ? ", " : "") + std::to_string(kb);
  return out + "}";
}

class BigBird : public ::testing::TestWithParam<PatternBackend> {};

TEST_P(BigBird, global_window_and_random_blocks_as_defined) {
  const PatternBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "03.1");
  for (const BigBirdCase& c : kBigBirdCases) {
    const SparsePattern p = impl.bigbird(c.n, c.block, c.global_blocks, c.random_blocks, c.seed);
    ASSERT_EQ(p.seq_q, c.n) << c.label << ": seq_q must be n";
    ASSERT_EQ(p.seq_k, c.n) << c.label << ": seq_k must be n";
    ASSERT_NO_THROW(validate_pattern("test", "pattern", p, c.n, c.n))
        << c.label << ": row_start has n + 1 offsets, and each row's keys are sorted, distinct and below n";
    const std::size_t blocks = c.n / c.block, first = (c.global_blocks + 1) / 2, last = c.global_blocks / 2;
    const auto is_global = [&](std::size_t kb) { return kb < first || kb >= blocks - last; };
    for (std::size_t qb = 0; qb < blocks; ++qb) {
      bool whole = false;
      const std::set<std::size_t> keys = key_blocks_of_row(p, qb * c.block, c.block, whole);
      const std::string where = std::string(c.label) + ", query block " + std::to_string(qb) + " (key blocks " +
                                blocks_text(keys) + ")";
      ASSERT_TRUE(whole) << where << ": BigBird attends whole key blocks of " << c.block << " positions";
      for (std::size_t row = qb * c.block + 1; row < (qb + 1) * c.block; ++row)
        ASSERT_EQ(p.row_size(row), p.row_size(qb * c.block))
            << where << ": every row of a query block has the same keys (row " << row << ")";
      if (is_global(qb)) {
        EXPECT_EQ(keys.size(), blocks) << where << ": a global block (the first ceil(g/2) and the last floor(g/2) "
                                       << "of the g = " << c.global_blocks << ") attends to every key";
        continue;
      }
      std::set<std::size_t> expected_fixed;  // the 3-block window and the global blocks
      for (std::size_t kb = 0; kb < blocks; ++kb)
        if (is_global(kb) || kb + 1 == qb || kb == qb || kb == qb + 1) expected_fixed.insert(kb);
      for (std::size_t kb : expected_fixed)
        EXPECT_TRUE(keys.count(kb)) << where << ": key block " << kb << " is in the window {qb - 1, qb, qb + 1} or "
                                    << "global, so every row of the block attends to it";
      std::size_t random = 0;
      for (std::size_t kb : keys) random += expected_fixed.count(kb) ? 0 : 1;
      EXPECT_EQ(random, c.random_blocks)
          << where << ": besides the window and the global blocks, exactly r = " << c.random_blocks
          << " random key blocks (distinct, drawn from the others)";
    }
  }
}

TEST_P(BigBird, the_same_seed_gives_the_same_pattern_and_another_seed_another) {
  const PatternBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "03.1");
  const SparsePattern a = impl.bigbird(512, 8, 2, 3, 21), b = impl.bigbird(512, 8, 2, 3, 21);
  EXPECT_EQ(a.keys, b.keys) << "64 blocks of 8, g = 2, r = 3: the same seed must give the same random blocks "
                            << "(draw with tvlab::Rng(seed), nothing else)";
  const SparsePattern other = impl.bigbird(512, 8, 2, 3, 22);
  EXPECT_NE(a.keys, other.keys) << "64 blocks of 8, g = 2, r = 3: seeds 21 and 22 gave the same random blocks for "
                                << "all 62 query blocks; are the random blocks drawn from the seed?";
}

TEST_P(BigBird, draws_the_random_blocks_as_the_library_does) {
  const PatternBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "03.1");
  for (const BigBirdCase& c : kBigBirdCases) {
    const SparsePattern expected = tvlab::bigbird_pattern(c.n, c.block, c.global_blocks, c.random_blocks, c.seed);
    const SparsePattern got = impl.bigbird(c.n, c.block, c.global_blocks, c.random_blocks, c.seed);
    ASSERT_EQ(got.row_start.size(), expected.row_start.size()) << c.label << ": n + 1 row offsets";
    for (std::size_t row = 0; row < c.n; row += c.block) {
      bool whole = false;
      EXPECT_EQ(key_blocks_of_row(got, row, c.block, whole), key_blocks_of_row(expected, row, c.block, whole))
          << c.label << ", seed " << c.seed << ", query block " << row / c.block
          << ": the key blocks differ from tvlab::bigbird_pattern's; draw the random blocks in the order "
          << "exercises.md gives, with one tvlab::Rng(seed) for the whole pattern";
    }
  }
}

TEST_P(BigBird, rejects_bad_input_naming_the_parameter) {
  const PatternBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "03.1");
  EXPECT_TRUE(throws_error_naming([&] { impl.bigbird(64, 0, 2, 1, 1); }, {"bigbird_pattern", "block"})) << "block 0";
  EXPECT_TRUE(throws_error_naming([&] { impl.bigbird(60, 8, 2, 1, 1); }, {"bigbird_pattern", "block"}))
      << "n = 60 is not a multiple of block = 8";
  EXPECT_TRUE(throws_error_naming([&] { impl.bigbird(64, 8, 9, 1, 1); }, {"bigbird_pattern", "global_blocks"}))
      << "9 global blocks of 8";
  EXPECT_TRUE(throws_error_naming([&] { impl.bigbird(64, 8, 2, 4, 1); }, {"bigbird_pattern", "random_blocks"}))
      << "8 blocks, g = 2: an interior query block has 8 - 3 - 2 = 3 blocks to draw from, not 4";
}

INSTANTIATE_TEST_SUITE_P(Ch03, BigBird, ::testing::ValuesIn(tvlab::testing::under_test(pattern_backends(), &PatternBackend::bigbird)),
                         tvlab::testing::ImplName());

// ------------------------------------------------------------------------------ 03.2 the receptive field

class ReceptiveField : public ::testing::TestWithParam<PatternBackend> {};

// The inputs that reach output `position` through the layers, from the dense masks: the row
// vector e_position times M_L, then M_{L-1}, ..., M_1 (layers[0] applied first), with
// boolean (or, and) arithmetic. A different computation from walking the key lists.
std::vector<bool> dense_oracle(const std::vector<SparsePattern>& layers, std::size_t position) {
  const std::size_t n = layers[0].seq_q;
  std::vector<bool> reach(n, false);
  reach[position] = true;
  for (auto layer = layers.rbegin(); layer != layers.rend(); ++layer) {
    const Mask2 mask = layer->to_mask();
    std::vector<bool> below(n, false);
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t i = 0; i < n && !below[j]; ++i) below[j] = reach[i] && mask(i, j);
    reach = below;
  }
  return reach;
}

// The closed form of L stacked windows reaching `back` positions back and `ahead` ahead, with
// every `step`-th position (a dilated window): p + step m for -L back <= m <= L ahead, in [0, n).
std::vector<bool> window_reach(std::size_t n, std::size_t layers, std::size_t back, std::size_t ahead,
                               std::size_t step, std::size_t p) {
  std::vector<bool> reach(n, false);
  for (long long m = -static_cast<long long>(layers * back); m <= static_cast<long long>(layers * ahead); ++m) {
    const long long j = static_cast<long long>(p) + m * static_cast<long long>(step);
    if (j >= 0 && j < static_cast<long long>(n)) reach[static_cast<std::size_t>(j)] = true;
  }
  return reach;
}

TEST_P(ReceptiveField, stacked_windows_reach_L_times_w) {
  const PatternBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "03.2");
  const std::size_t n = 120;
  for (const std::size_t layers : {1UL, 2UL, 5UL})
    for (const std::size_t w : {1UL, 3UL, 8UL})
      for (const std::size_t p : {0UL, 37UL, 119UL}) {
        const std::vector<SparsePattern> causal(layers, sliding_window_pattern(n, w, 0));
        EXPECT_EQ(impl.receptive_field(causal, p), window_reach(n, layers, w, 0, 1, p))
            << layers << " causal windows reaching w = " << w << " back, position " << p << ": the inputs "
            << "$[p - L w, p]$ reach it (each layer moves information at most w positions); got "
            << set_text(impl.receptive_field(causal, p));
        const std::vector<SparsePattern> both(layers, sliding_window_pattern(n, w, w));
        EXPECT_EQ(impl.receptive_field(both, p), window_reach(n, layers, w, w, 1, p))
            << layers << " windows of radius w = " << w << ", position " << p << ": $[p - L w, p + L w] \\cap [0, n)$";
      }
}

TEST_P(ReceptiveField, dilated_windows_reach_every_dilation_th_position) {
  const PatternBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "03.2");
  const std::size_t n = 100;
  for (const std::size_t dilation : {2UL, 3UL})
    for (const std::size_t layers : {1UL, 3UL}) {
      const std::vector<SparsePattern> stack(layers, dilated_window_pattern(n, 2, dilation, false));
      for (const std::size_t p : {0UL, 50UL, 99UL})
        EXPECT_EQ(impl.receptive_field(stack, p), window_reach(n, layers, 2, 2, dilation, p))
            << layers << " dilated windows (radius 2, dilation " << dilation << "), position " << p
            << ": $p + \\delta m$ for $|m| \\le L w$, the holes between stay unreached; got "
            << set_text(impl.receptive_field(stack, p));
    }
}

TEST_P(ReceptiveField, global_tokens_reach_everything_in_two_layers) {
  const PatternBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "03.2");
  const std::size_t n = 90, w = 2, p = 40;
  const SparsePattern longformer = longformer_pattern(n, w, {0, 70}, false);
  std::vector<bool> one(n, false);  // one layer: the window and the two global positions
  for (std::size_t j = p - w; j <= p + w; ++j) one[j] = true;
  one[0] = one[70] = true;
  EXPECT_EQ(impl.receptive_field({longformer}, p), one)
      << "one Longformer layer, position 40: its window 38..42 and the global positions 0 and 70; got "
      << set_text(impl.receptive_field({longformer}, p));
  EXPECT_EQ(impl.receptive_field({longformer, longformer}, p), std::vector<bool>(n, true))
      << "two Longformer layers: every position reaches a global one, which position 40 reads; got "
      << set_text(impl.receptive_field({longformer, longformer}, p));
  EXPECT_EQ(impl.receptive_field({longformer}, 70), std::vector<bool>(n, true))
      << "a global position sees every key in one layer";
}

TEST_P(ReceptiveField, layers_apply_in_order_as_the_dense_product) {
  const PatternBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "03.2");
  const std::size_t n = 64;
  // Not symmetric in the order: a causal window, then a strided layer, then Longformer.
  const std::vector<SparsePattern> stack = {sliding_window_pattern(n, 3, 0), strided_pattern(n, 8, 2),
                                            longformer_pattern(n, 1, {5}, true)};
  for (const std::size_t p : {0UL, 9UL, 31UL, 63UL}) {
    EXPECT_EQ(impl.receptive_field(stack, p), dense_oracle(stack, p))
        << "a causal window, then strided (l = 8), then causal Longformer with global 5, position " << p
        << ": layers[0] is applied first, so walk back from the last layer; got " << set_text(impl.receptive_field(stack, p))
        << ", expected " << set_text(dense_oracle(stack, p));
    const std::vector<SparsePattern> reversed(stack.rbegin(), stack.rend());
    EXPECT_EQ(impl.receptive_field(reversed, p), dense_oracle(reversed, p))
        << "the same layers in the opposite order, position " << p;
  }
  // Windows commute (their reaches add up in any order); the fixed pattern's summary head, whose
  // rows do not hold i itself, does not: read by the last layer it sees only the summary columns
  // 7, 15, 23, ...; read by the first, their left neighbours too.
  const std::vector<SparsePattern> window_then_summary = {sliding_window_pattern(n, 1, 0), fixed_pattern(n, 8, 1, 1)};
  const std::vector<SparsePattern> summary_then_window(window_then_summary.rbegin(), window_then_summary.rend());
  for (const std::size_t p : {20UL, 40UL}) {
    EXPECT_EQ(impl.receptive_field(window_then_summary, p), dense_oracle(window_then_summary, p))
        << "a causal window reaching 1 back, then the fixed pattern's summary head (l = 8, c = 1), position " << p
        << ": the summary columns up to " << p << " and their left neighbours; got "
        << set_text(impl.receptive_field(window_then_summary, p)) << " (layers[0] is applied first: walk back from "
        << "the last layer)";
    EXPECT_EQ(impl.receptive_field(summary_then_window, p), dense_oracle(summary_then_window, p))
        << "the summary head, then the causal window, position " << p << ": the summary columns up to " << p
        << " only; got " << set_text(impl.receptive_field(summary_then_window, p));
  }
}

TEST_P(ReceptiveField, rejects_bad_input_naming_the_parameter) {
  const PatternBackend& impl = GetParam();
  TVLAB_EXERCISE(impl, "03.2");
  const SparsePattern window = sliding_window_pattern(10, 1, 1);
  EXPECT_TRUE(throws_error_naming([&] { impl.receptive_field({}, 0); }, {"receptive_field", "layers"}))
      << "no layer";
  EXPECT_TRUE(throws_error_naming([&] { impl.receptive_field({window}, 10); }, {"receptive_field", "position"}))
      << "position 10 of a sequence of 10";
  EXPECT_TRUE(throws_error_naming([&] { impl.receptive_field({window, sliding_window_pattern(12, 1, 1)}, 0); },
                                  {"receptive_field", "layers"}))
      << "layers of 10 and 12 positions";
}

INSTANTIATE_TEST_SUITE_P(Ch03, ReceptiveField,
                         ::testing::ValuesIn(tvlab::testing::under_test(pattern_backends(), &PatternBackend::receptive_field)),
                         tvlab::testing::ImplName());

}  // namespace
}  // namespace tvlab::sparse
