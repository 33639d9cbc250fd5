// Chapter 03, the patterns as data: every builder against a membership rule written here from
// its paper's definition, block layouts and masks that round trip (full and partial blocks counted
// by brute force), every validation error naming its parameter, and the reference sparse
// attention equal to chapter 00's dense attention with the pattern as its boolean mask.

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../common/attention_oracle.hpp"
#include "../common/testing.hpp"
#include "tvlab/core/attention_patterns.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/core/sparse_pattern.hpp"
#include "tvlab/ref/attention.hpp"
#include "tvlab/ref/sparse_attention.hpp"

namespace tvlab::ch03 {
namespace {

using tvlab::testing::matches;
using tvlab::testing::throws_error_naming;

// ------------------------------------------------------------------------------- membership rules

using Rule = std::function<bool(long long i, long long j)>;

// Passes when `p` is a valid n x n pattern (sorted, distinct keys) that allows exactly the pairs
// `rule` allows; otherwise lists the first disagreements and, when small, both grids.
::testing::AssertionResult follows_rule(const SparsePattern& p, std::size_t n, const Rule& rule,
                                        const std::string& what) {
  try {
    validate_pattern("test", "pattern", p, n, n);
  } catch (const Error& e) {
    return ::testing::AssertionFailure() << what << ": not a valid pattern: " << e.what();
  }
  std::ostringstream diff;
  std::size_t wrong = 0;
  std::string expected_grid;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      const bool want = rule(static_cast<long long>(i), static_cast<long long>(j));
      expected_grid += want ? '#' : '.';
      if (p.allows(i, j) != want && wrong++ < 5)
        diff << "\n  (i=" << i << ", j=" << j << "): the pattern " << (want ? "lacks" : "has")
             << " the pair, the definition " << (want ? "allows" : "forbids") << " it";
    }
    expected_grid += '\n';
  }
  if (wrong == 0) return ::testing::AssertionSuccess();
  auto failure = ::testing::AssertionFailure();
  failure << what << ": " << wrong << " pairs differ from the definition" << diff.str();
  if (n <= 40) failure << "\npattern:\n" << pattern_grid(p) << "definition:\n" << expected_grid;
  return failure;
}

// Sequence lengths for every builder: 1, tiny, and lengths that are not multiples of the strides,
// blocks and windows below.
const std::size_t kSizes[] = {1, 2, 7, 16, 33, 50};

TEST(Ch03Patterns, full_attention_is_every_key_or_every_earlier_key) {
  for (std::size_t n : kSizes) {
    EXPECT_TRUE(follows_rule(full_pattern(n, false), n, [](long long, long long) { return true; }, "full"));
    EXPECT_TRUE(follows_rule(full_pattern(n, true), n, [](long long i, long long j) { return j <= i; }, "causal"));
  }
}

TEST(Ch03Patterns, sliding_window_keeps_i_minus_left_to_i_plus_right) {
  const std::pair<long long, long long> windows[] = {{0, 0}, {1, 1}, {3, 3}, {3, 0}, {0, 2}, {5, 2}, {49, 49}, {100, 0}};
  for (std::size_t n : kSizes)
    for (const auto& [l, r] : windows)
      EXPECT_TRUE(follows_rule(sliding_window_pattern(n, l, r), n,
                               [l = l, r = r](long long i, long long j) { return i - l <= j && j <= i + r; },
                               "sliding_window_pattern(" + std::to_string(n) + ", " + std::to_string(l) + ", " +
                                   std::to_string(r) + ")"));
}

TEST(Ch03Patterns, dilated_window_keeps_multiples_of_the_dilation_within_the_radius) {
  for (std::size_t n : kSizes)
    for (long long w : {0, 1, 2, 5})
      for (std::size_t d : {1, 2, 3, 7})
        for (bool causal : {false, true}) {
          // Longformer: j = i + m d with |m| <= w (m <= 0 when causal).
          const Rule rule = [&](long long i, long long j) {
            const long long diff = j - i, dd = static_cast<long long>(d);
            return diff % dd == 0 && std::llabs(diff) / dd <= w && (!causal || diff <= 0);
          };
          EXPECT_TRUE(follows_rule(dilated_window_pattern(n, w, d, causal), n, rule,
                                   "dilated_window_pattern(" + std::to_string(n) + ", " + std::to_string(w) + ", " +
                                       std::to_string(d) + (causal ? ", causal)" : ")")));
        }
}

TEST(Ch03Patterns, strided_heads_follow_child_et_al) {
  for (std::size_t n : kSizes)
    for (std::size_t l : {1, 2, 3, 4, 5, 8}) {
      const long long ll = static_cast<long long>(l);
      // A1: the last l positions; A2: every l-th position back (both causal).
      const Rule a1 = [&](long long i, long long j) { return j <= i && i - j < ll; };
      const Rule a2 = [&](long long i, long long j) { return j <= i && (i - j) % ll == 0; };
      const std::string name = "strided_pattern(" + std::to_string(n) + ", " + std::to_string(l);
      EXPECT_TRUE(follows_rule(strided_pattern(n, l, 0), n, a1, name + ", head 0)"));
      EXPECT_TRUE(follows_rule(strided_pattern(n, l, 1), n, a2, name + ", head 1)"));
      EXPECT_TRUE(follows_rule(strided_pattern(n, l, 2), n,
                               [&](long long i, long long j) { return a1(i, j) || a2(i, j); }, name + ", head 2)"));
    }
}

TEST(Ch03Patterns, fixed_heads_follow_child_et_al) {
  for (std::size_t n : kSizes)
    for (std::size_t l : {1, 2, 4, 5, 8})
      for (std::size_t c : {std::size_t{1}, (l + 1) / 2, l}) {
        const long long ll = static_cast<long long>(l), cc = static_cast<long long>(c);
        // A1: the query's own block; A2: the last c columns of every block (both causal).
        const Rule a1 = [&](long long i, long long j) { return j <= i && j / ll == i / ll; };
        const Rule a2 = [&](long long i, long long j) { return j <= i && j % ll >= ll - cc; };
        const std::string name =
            "fixed_pattern(" + std::to_string(n) + ", " + std::to_string(l) + ", " + std::to_string(c);
        EXPECT_TRUE(follows_rule(fixed_pattern(n, l, c, 0), n, a1, name + ", head 0)"));
        EXPECT_TRUE(follows_rule(fixed_pattern(n, l, c, 1), n, a2, name + ", head 1)"));
        EXPECT_TRUE(follows_rule(fixed_pattern(n, l, c, 2), n,
                                 [&](long long i, long long j) { return a1(i, j) || a2(i, j); }, name + ", head 2)"));
      }
}

TEST(Ch03Patterns, longformer_is_a_window_plus_symmetric_globals) {
  for (std::size_t n : kSizes)
    for (long long w : {0, 1, 3})
      for (const std::vector<std::size_t>& globals :
           {std::vector<std::size_t>{}, {0}, {0, n - 1}, {n / 2, 0, n / 2}})
        for (bool causal : {false, true}) {
          const std::set<long long> g(globals.begin(), globals.end());
          // A global query sees every key, every query sees the global keys, the rest see the window.
          const Rule rule = [&](long long i, long long j) {
            if (causal && j > i) return false;
            return g.count(i) > 0 || g.count(j) > 0 || std::llabs(i - j) <= w;
          };
          EXPECT_TRUE(follows_rule(longformer_pattern(n, w, globals, causal), n, rule,
                                   "longformer_pattern(" + std::to_string(n) + ", " + std::to_string(w) + ", " +
                                       std::to_string(globals.size()) + " globals" + (causal ? ", causal)" : ")")));
        }
}

TEST(Ch03Patterns, dilation_one_and_wide_windows_are_the_simpler_patterns) {
  for (std::size_t n : kSizes) {
    const auto same = [](const SparsePattern& a, const SparsePattern& b) {
      return a.row_start == b.row_start && a.keys == b.keys;
    };
    EXPECT_TRUE(same(dilated_window_pattern(n, 3, 1, false), sliding_window_pattern(n, 3, 3))) << n;
    EXPECT_TRUE(same(dilated_window_pattern(n, 3, 1, true), sliding_window_pattern(n, 3, 0))) << n;
    // A window of at least n - 1 on each side is full attention; on the left only, causal attention.
    const long long wide = static_cast<long long>(n) - 1;
    EXPECT_TRUE(same(sliding_window_pattern(n, wide, wide), full_pattern(n, false))) << n;
    EXPECT_TRUE(same(sliding_window_pattern(n, 10 * wide + 5, 0), full_pattern(n, true))) << n;
    EXPECT_TRUE(same(longformer_pattern(n, 3, {}, false), sliding_window_pattern(n, 3, 3))) << n;
  }
}

// ----------------------------------------------------------------------------------- BigBird

// BigBird ITC at the level of blocks, from the paper: global blocks (the first ceil(g/2) and the
// last floor(g/2)) see and are seen by everything, every other block sees its 3-block window and
// r further blocks that are neither global nor in the window. Checks that every tile is all or
// nothing, and each row of blocks against that rule.
::testing::AssertionResult is_bigbird(const SparsePattern& p, std::size_t n, std::size_t b, std::size_t g,
                                      std::size_t r) {
  const std::string what = "bigbird_pattern(" + std::to_string(n) + ", " + std::to_string(b) + ", " +
                           std::to_string(g) + ", " + std::to_string(r) + ")";
  try {
    validate_pattern("test", "pattern", p, n, n);
  } catch (const Error& e) {
    return ::testing::AssertionFailure() << what << ": not a valid pattern: " << e.what();
  }
  const std::size_t blocks = n / b;
  const auto global = [&](std::size_t J) { return J < (g + 1) / 2 || J + g / 2 >= blocks; };
  for (std::size_t I = 0; I < blocks; ++I) {
    std::size_t random = 0;
    for (std::size_t J = 0; J < blocks; ++J) {
      const bool attended = p.allows(I * b, J * b);
      for (std::size_t i = I * b; i < (I + 1) * b; ++i)
        for (std::size_t j = J * b; j < (J + 1) * b; ++j)
          if (p.allows(i, j) != attended)
            return ::testing::AssertionFailure() << what << ": tile (" << I << ", " << J
                                                 << ") is partly attended; BigBird attends in whole blocks";
      const bool window = J + 1 >= I && J <= I + 1;
      if (global(I) || global(J) || window) {
        if (!attended)
          return ::testing::AssertionFailure() << what << ": block " << I << " does not see block " << J << " ("
                                               << (global(I) ? "a global row" : global(J) ? "a global column" : "its window")
                                               << ")";
      } else if (attended) {
        ++random;
      }
    }
    if (!global(I) && random != r)
      return ::testing::AssertionFailure() << what << ": block " << I << " sees " << random
                                           << " blocks outside its window and the global ones, expected r = " << r;
  }
  return ::testing::AssertionSuccess();
}

TEST(Ch03BigBird, every_row_of_blocks_has_its_window_the_globals_and_r_random_blocks) {
  std::size_t cases = 0;
  for (std::size_t b : {1, 2, 3, 4})
    for (std::size_t blocks = 1; blocks <= 12; ++blocks)
      for (std::size_t g = 0; g <= 3 && g <= blocks; ++g)
        for (std::size_t r = 0; r <= 3; ++r) {
          if (r > 0 && blocks < g + 3 + r) continue;
          const std::size_t n = b * blocks;
          EXPECT_TRUE(is_bigbird(bigbird_pattern(n, b, g, r, 1000 + n + g + r), n, b, g, r));
          ++cases;
        }
  EXPECT_GT(cases, 100u);
}

// The draw the header documents, written again here: candidates in increasing order, a partial
// Fisher-Yates shuffle with next_u64() % (m - t). Pins the sequence another implementation (the
// exercise) must reproduce.
SparsePattern documented_bigbird(std::size_t n, std::size_t b, std::size_t g, std::size_t r, std::uint64_t seed) {
  const std::size_t blocks = n / b;
  const auto global = [&](std::size_t J) { return J < (g + 1) / 2 || J + g / 2 >= blocks; };
  Mask2 tiles = xt::zeros<bool>({blocks, blocks});
  Rng rng(seed);
  for (std::size_t I = 0; I < blocks; ++I) {
    std::vector<std::size_t> candidates;
    for (std::size_t J = 0; J < blocks; ++J) {
      const bool window = J + 1 >= I && J <= I + 1;
      if (global(I) || global(J) || window) tiles(I, J) = true;
      else candidates.push_back(J);
    }
    if (global(I)) continue;
    for (std::size_t t = 0; t < r; ++t) {
      const std::size_t pick = t + static_cast<std::size_t>(rng.next_u64() % (candidates.size() - t));
      std::swap(candidates[t], candidates[pick]);
      tiles(I, candidates[t]) = true;
    }
  }
  Mask2 allowed = xt::zeros<bool>({n, n});
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) allowed(i, j) = tiles(i / b, j / b);
  return pattern_from_mask(allowed);
}

TEST(Ch03BigBird, the_random_blocks_follow_the_documented_draw) {
  for (const auto& [n, b, g, r] : {std::tuple<std::size_t, std::size_t, std::size_t, std::size_t>{48, 4, 2, 3},
                                   {40, 2, 1, 2}, {30, 3, 0, 5}, {64, 8, 3, 1}, {12, 1, 2, 4}})
    for (std::uint64_t seed : {0ull, 7ull, 123456789ull}) {
      const SparsePattern got = bigbird_pattern(n, b, g, r, seed), want = documented_bigbird(n, b, g, r, seed);
      EXPECT_EQ(got.keys, want.keys) << "n " << n << ", block " << b << ", g " << g << ", r " << r << ", seed " << seed;
      EXPECT_EQ(got.row_start, want.row_start);
    }
  // The seed matters: 22 rows of blocks each draw 3 of 19 candidates, two seeds agreeing on all of
  // them by chance is far less likely than 1e-6.
  EXPECT_NE(bigbird_pattern(96, 4, 2, 3, 1).keys, bigbird_pattern(96, 4, 2, 3, 2).keys);
}

TEST(Ch03BigBird, random_blocks_are_uniform_over_the_candidates) {
  // Row of blocks 5 of 12 (g = 2, r = 2) has m = 12 - 2 - 3 = 7 candidates; over 2000 seeds each
  // is drawn 2000 r / m = 571 times on average, with a binomial standard deviation of
  // sqrt(2000 (2/7)(5/7)) = 20. A bound of 100 (5 deviations) fails a biased draw (one that
  // always skipped a candidate, or took the first ones) and not a uniform one.
  const std::size_t blocks = 12, row = 5, trials = 2000;
  std::vector<std::size_t> drawn(blocks, 0);
  for (std::uint64_t seed = 0; seed < trials; ++seed) {
    const SparsePattern p = bigbird_pattern(blocks, 1, 2, 2, seed);
    for (std::size_t e = p.row_start[row]; e < p.row_start[row + 1]; ++e) ++drawn[p.keys[e]];
  }
  for (std::size_t J = 0; J < blocks; ++J) {
    const bool fixed = J == 0 || J == blocks - 1 || (J + 1 >= row && J <= row + 1);
    if (fixed) EXPECT_EQ(drawn[J], trials) << "block " << J;
    else EXPECT_NEAR(static_cast<double>(drawn[J]), trials * 2.0 / 7.0, 100.0) << "block " << J;
  }
}

// ---------------------------------------------------------------------- unions, masks, layouts

TEST(Ch03Patterns, a_union_allows_what_any_pattern_allows) {
  for (std::size_t n : kSizes) {
    const auto same = [](const SparsePattern& a, const SparsePattern& b) {
      return a.row_start == b.row_start && a.keys == b.keys;
    };
    EXPECT_TRUE(same(pattern_union({strided_pattern(n, 3, 0), strided_pattern(n, 3, 1)}), strided_pattern(n, 3, 2)));
    EXPECT_TRUE(same(pattern_union({fixed_pattern(n, 4, 2, 0), fixed_pattern(n, 4, 2, 1)}), fixed_pattern(n, 4, 2, 2)));
  }
  Rng rng(31);
  Mask2 a = xt::zeros<bool>({9, 14}), b = a, c = a;
  for (std::size_t i = 0; i < 9; ++i)
    for (std::size_t j = 0; j < 14; ++j) {
      a(i, j) = rng.uniform() < 0.2;
      b(i, j) = rng.uniform() < 0.3;
      c(i, j) = rng.uniform() < 0.1;
    }
  const Mask2 either = pattern_union({pattern_from_mask(a), pattern_from_mask(b), pattern_from_mask(c)}).to_mask();
  for (std::size_t i = 0; i < 9; ++i)
    for (std::size_t j = 0; j < 14; ++j) EXPECT_EQ(either(i, j), a(i, j) || b(i, j) || c(i, j)) << i << ", " << j;
}

// A random mask with a given density, plus an empty row and a full row.
Mask2 random_mask(std::size_t rows, std::size_t cols, double density, std::uint64_t seed) {
  Rng rng(seed);
  Mask2 m = xt::zeros<bool>({rows, cols});
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) m(i, j) = rng.uniform() < density;
  if (rows > 2) {
    for (std::size_t j = 0; j < cols; ++j) m(1, j) = false;
    for (std::size_t j = 0; j < cols; ++j) m(2, j) = true;
  }
  return m;
}

TEST(Ch03Patterns, masks_and_patterns_round_trip) {
  for (const auto& [rows, cols] : {std::pair<std::size_t, std::size_t>{1, 1}, {5, 9}, {17, 3}, {30, 30}})
    for (double density : {0.0, 0.3, 1.0}) {
      const Mask2 m = random_mask(rows, cols, density, rows * 100 + cols);
      const SparsePattern p = pattern_from_mask(m);
      EXPECT_NO_THROW(validate_pattern("test", "pattern", p, rows, cols));
      EXPECT_EQ(p.to_mask(), m) << rows << " x " << cols << ", density " << density;
      std::size_t allowed = 0;
      for (bool x : m) allowed += x ? 1 : 0;
      EXPECT_EQ(p.pairs(), allowed);
    }
}

// Every test pattern of this file, with a name: the named builders at sizes that are multiples of
// no block below, and a random rectangular one.
std::vector<std::pair<std::string, SparsePattern>> sample_patterns() {
  const std::size_t n = 33;
  return {{"full", full_pattern(n, false)},
          {"causal", full_pattern(n, true)},
          {"window 3,3", sliding_window_pattern(n, 3, 3)},
          {"causal window of 5", sliding_window_pattern(n, 4, 0)},
          {"dilated 2 x 3", dilated_window_pattern(n, 2, 3, false)},
          {"strided 5", strided_pattern(n, 5, 2)},
          {"fixed 8, 2", fixed_pattern(n, 8, 2, 2)},
          {"longformer", longformer_pattern(n, 2, {0, 17}, false)},
          {"bigbird", bigbird_pattern(36, 4, 2, 2, 5)},
          {"random 13 x 29", pattern_from_mask(random_mask(13, 29, 0.25, 9))}};
}

TEST(Ch03Layout, block_layouts_list_exactly_the_non_empty_tiles_and_round_trip) {
  const std::pair<std::size_t, std::size_t> tiles[] = {{1, 1}, {3, 5}, {8, 8}, {4, 16}, {40, 40}};
  for (const auto& [name, p] : sample_patterns())
    for (const auto& [bq, bk] : tiles) {
      SCOPED_TRACE(name + ", tiles " + std::to_string(bq) + " x " + std::to_string(bk));
      const BlockLayout layout = to_block_layout(p, bq, bk);
      ASSERT_NO_THROW(validate_block_layout("test", "layout", layout, p.seq_q, p.seq_k));
      const SparsePattern back = to_pattern(layout);
      EXPECT_EQ(back.row_start, p.row_start);
      EXPECT_EQ(back.keys, p.keys);
      // Brute force: count the allowed entries of every tile.
      std::size_t non_empty = 0, partial = 0;
      for (std::size_t qb = 0; qb * bq < p.seq_q; ++qb) {
        std::vector<std::uint32_t> expected_blocks;
        for (std::size_t kb = 0; kb * bk < p.seq_k; ++kb) {
          const std::size_t rows = std::min(bq, p.seq_q - qb * bq), cols = std::min(bk, p.seq_k - kb * bk);
          std::size_t count = 0;
          for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t c = 0; c < cols; ++c) count += p.allows(qb * bq + r, kb * bk + c) ? 1 : 0;
          if (count == 0) continue;
          expected_blocks.push_back(static_cast<std::uint32_t>(kb));
          ++non_empty;
          // Find the tile in the layout and check full/partial and the mask's bytes.
          const auto first = layout.key_blocks.begin() + static_cast<std::ptrdiff_t>(layout.block_start[qb]);
          const auto last = layout.key_blocks.begin() + static_cast<std::ptrdiff_t>(layout.block_start[qb + 1]);
          const auto it = std::find(first, last, static_cast<std::uint32_t>(kb));
          ASSERT_NE(it, last) << "tile (" << qb << ", " << kb << ") holds " << count << " pairs but is not listed";
          const std::int32_t mask = layout.partial[static_cast<std::size_t>(it - layout.key_blocks.begin())];
          if (count == rows * cols) {
            EXPECT_EQ(mask, -1) << "tile (" << qb << ", " << kb << ") is full";
            continue;
          }
          ++partial;
          ASSERT_GE(mask, 0) << "tile (" << qb << ", " << kb << ") is partial";
          const std::uint8_t* bytes = layout.masks.data() + static_cast<std::size_t>(mask) * bq * bk;
          for (std::size_t r = 0; r < bq; ++r)
            for (std::size_t c = 0; c < bk; ++c) {
              const bool inside = r < rows && c < cols;
              EXPECT_EQ(bytes[r * bk + c] != 0, inside && p.allows(qb * bq + r, kb * bk + c))
                  << "tile (" << qb << ", " << kb << ") entry (" << r << ", " << c << ")";
            }
        }
        EXPECT_EQ(std::vector<std::uint32_t>(layout.key_blocks.begin() + static_cast<std::ptrdiff_t>(layout.block_start[qb]),
                                             layout.key_blocks.begin() + static_cast<std::ptrdiff_t>(layout.block_start[qb + 1])),
                  expected_blocks)
            << "query block " << qb;
      }
      EXPECT_EQ(layout.blocks(), non_empty);
      EXPECT_EQ(layout.partial_blocks(), partial);
    }
}

TEST(Ch03Layout, a_layout_written_block_by_block_allows_whole_tiles) {
  for (const auto& [seq_q, seq_k, bq, bk] : {std::tuple<std::size_t, std::size_t, std::size_t, std::size_t>{20, 20, 4, 4},
                                             {13, 29, 3, 5}, {7, 7, 8, 8}, {1, 1, 1, 1}}) {
    const std::size_t qbs = (seq_q + bq - 1) / bq, kbs = (seq_k + bk - 1) / bk;
    const Mask2 blocks = random_mask(qbs, kbs, 0.4, seq_q * seq_k);
    const BlockLayout layout = block_layout_from_blocks(seq_q, seq_k, bq, bk, blocks);
    ASSERT_NO_THROW(validate_block_layout("test", "layout", layout, seq_q, seq_k));
    EXPECT_EQ(layout.partial_blocks(), 0u);
    const Mask2 allowed = to_pattern(layout).to_mask();
    for (std::size_t i = 0; i < seq_q; ++i)
      for (std::size_t j = 0; j < seq_k; ++j)
        EXPECT_EQ(allowed(i, j), blocks(i / bq, j / bk)) << "(" << i << ", " << j << ") of " << seq_q << " x " << seq_k;
  }
}

// ---------------------------------------------------------------------------------- bad input

// A small valid pattern to break: 3 rows over 4 keys.
SparsePattern small_pattern() { return pattern_from_mask(random_mask(3, 4, 0.5, 3)); }

TEST(Ch03Validation, every_broken_pattern_is_refused_naming_what_is_wrong) {
  const auto refused = [](const SparsePattern& p, const std::vector<std::string>& needles) {
    return throws_error_naming([&] { validate_pattern("sparse_attention", "patterns", p, 3, 4); }, needles);
  };
  SparsePattern p = small_pattern();
  EXPECT_NO_THROW(validate_pattern("sparse_attention", "patterns", p, 3, 4));
  EXPECT_TRUE(throws_error_naming([&] { validate_pattern("sparse_attention", "patterns", p, 3, 5); },
                                  {"sparse_attention", "patterns", "3 queries x 4 keys", "expected 3 x 5"}));
  p = small_pattern();
  p.row_start.pop_back();
  EXPECT_TRUE(refused(p, {"patterns.row_start", "seq_q + 1"}));
  p = small_pattern();
  p.row_start[0] = 1;
  EXPECT_TRUE(refused(p, {"patterns.row_start", "from 0"}));
  // Offsets that run past the keys and come back: refused before any key is read.
  p = small_pattern();
  p.row_start = {0, p.keys.size() + 50, 0, p.keys.size()};
  EXPECT_TRUE(refused(p, {"patterns.row_start decreases at row 1"}));
  p = small_pattern();
  p.keys[p.row_start[2]] = 4;  // row 2 is full: its first key becomes 4 = seq_k
  EXPECT_TRUE(refused(p, {"patterns row 2", "key 4", "seq_k = 4"}));
  p = small_pattern();
  std::swap(p.keys[p.row_start[2]], p.keys[p.row_start[2] + 1]);
  EXPECT_TRUE(refused(p, {"patterns row 2", "increasing order"}));
  p = small_pattern();
  p.keys[p.row_start[2] + 1] = p.keys[p.row_start[2]];
  EXPECT_TRUE(refused(p, {"patterns row 2", "without repeats"}));
  EXPECT_TRUE(throws_error_naming(
      [&] { validate_head_patterns("sparse_attention", "patterns", {small_pattern(), small_pattern()}, 3, 3, 4); },
      {"patterns holds 2 patterns", "expected 1", "one per head (3)"}));
  EXPECT_TRUE(throws_error_naming([] { pattern_union({}); }, {"pattern_union", "patterns"}));
  EXPECT_TRUE(throws_error_naming([] { pattern_union({full_pattern(3, false), full_pattern(4, false)}); },
                                  {"pattern_union", "patterns", "expected 3 x 3"}));
}

TEST(Ch03Validation, every_broken_layout_is_refused_naming_what_is_wrong) {
  const SparsePattern p = sliding_window_pattern(10, 2, 2);
  const BlockLayout good = to_block_layout(p, 4, 4);
  const auto refused = [](const BlockLayout& layout, const std::vector<std::string>& needles) {
    return throws_error_naming([&] { validate_block_layout("block_sparse_attention", "layouts", layout, 10, 10); },
                               needles);
  };
  EXPECT_NO_THROW(validate_block_layout("block_sparse_attention", "layouts", good, 10, 10));
  EXPECT_TRUE(throws_error_naming([&] { validate_block_layout("block_sparse_attention", "layouts", good, 10, 12); },
                                  {"block_sparse_attention", "layouts is a layout of 10 queries x 10 keys", "10 x 12"}));
  BlockLayout l = good;
  l.block_q = 0;
  EXPECT_TRUE(refused(l, {"layouts.block_q and .block_k must be positive"}));
  l = good;
  l.block_k = std::size_t{1} << 40;
  EXPECT_TRUE(refused(l, {"layouts.block_q x .block_k", "2^24"}));
  l = good;
  l.block_start.push_back(l.key_blocks.size());
  EXPECT_TRUE(refused(l, {"layouts.block_start has 5 offsets", "3 query blocks"}));
  l = good;
  l.block_start = {0, l.key_blocks.size() + 9, 0, l.key_blocks.size()};
  EXPECT_TRUE(refused(l, {"layouts.block_start decreases at query block 1"}));
  l = good;
  l.partial.pop_back();
  EXPECT_TRUE(refused(l, {"layouts.partial has", "one per listed key block"}));
  l = good;
  l.masks.push_back(1);
  EXPECT_TRUE(refused(l, {"layouts.masks holds", "block_q x block_k = 16"}));
  l = good;
  l.key_blocks.back() = 3;
  EXPECT_TRUE(refused(l, {"layouts query block 2 names key block 3", "3 key blocks"}));
  l = good;
  std::swap(l.key_blocks[0], l.key_blocks[1]);
  EXPECT_TRUE(refused(l, {"layouts query block 0", "increasing order"}));
  l = good;
  l.partial[0] = static_cast<std::int32_t>(l.partial_blocks());
  EXPECT_TRUE(refused(l, {"layouts.partial names mask", "beyond the"}));
  l = good;
  l.partial[0] = -2;
  EXPECT_TRUE(refused(l, {"layouts.partial must be -1", "-2"}));
  // The conversions check their inputs too.
  EXPECT_TRUE(throws_error_naming([&] { to_block_layout(p, 0, 4); }, {"to_block_layout", "block_q (0)"}));
  EXPECT_TRUE(throws_error_naming([&] { to_block_layout(p, 4, 0); }, {"to_block_layout", "block_k (0)"}));
  EXPECT_TRUE(throws_error_naming([&] { to_block_layout(p, std::size_t{1} << 13, std::size_t{1} << 12); },
                                  {"to_block_layout", "block_q x block_k", "2^24"}));
  SparsePattern unsorted = p;
  std::swap(unsorted.keys[0], unsorted.keys[1]);
  EXPECT_TRUE(throws_error_naming([&] { to_block_layout(unsorted, 4, 4); }, {"to_block_layout", "pattern row 0"}));
  l = good;
  l.key_blocks.back() = 7;
  EXPECT_TRUE(throws_error_naming([&] { to_pattern(l); }, {"to_pattern", "layout query block 2 names key block 7"}));
  EXPECT_TRUE(throws_error_naming([] { block_layout_from_blocks(10, 10, 4, 4, xt::zeros<bool>({3, 2})); },
                                  {"block_layout_from_blocks", "blocks is [3, 2]", "[3, 3]"}));
  EXPECT_TRUE(throws_error_naming([] { block_layout_from_blocks(10, 10, 0, 4, xt::zeros<bool>({3, 3})); },
                                  {"block_layout_from_blocks", "block_q (0)"}));
}

TEST(Ch03Validation, every_builder_names_its_bad_parameter) {
  EXPECT_TRUE(throws_error_naming([] { sliding_window_pattern(8, -1, 0); }, {"sliding_window_pattern", "left (-1)", ">= 0"}));
  EXPECT_TRUE(throws_error_naming([] { sliding_window_pattern(8, 2, -3); }, {"sliding_window_pattern", "right (-3)"}));
  EXPECT_TRUE(throws_error_naming([] { dilated_window_pattern(8, -2, 1, false); }, {"dilated_window_pattern", "radius (-2)"}));
  EXPECT_TRUE(throws_error_naming([] { dilated_window_pattern(8, 2, 0, false); }, {"dilated_window_pattern", "dilation (0)"}));
  EXPECT_TRUE(throws_error_naming([] { strided_pattern(8, 0, 0); }, {"strided_pattern", "stride (0)"}));
  EXPECT_TRUE(throws_error_naming([] { strided_pattern(8, 2, 3); }, {"strided_pattern", "head (3)"}));
  EXPECT_TRUE(throws_error_naming([] { strided_pattern(8, 2, -1); }, {"strided_pattern", "head (-1)"}));
  EXPECT_TRUE(throws_error_naming([] { fixed_pattern(8, 0, 1, 0); }, {"fixed_pattern", "block (0)"}));
  EXPECT_TRUE(throws_error_naming([] { fixed_pattern(8, 4, 0, 0); }, {"fixed_pattern", "summary (0)"}));
  EXPECT_TRUE(throws_error_naming([] { fixed_pattern(8, 4, 5, 0); }, {"fixed_pattern", "summary (5)", "block (4)"}));
  EXPECT_TRUE(throws_error_naming([] { fixed_pattern(8, 4, 1, 7); }, {"fixed_pattern", "head (7)"}));
  EXPECT_TRUE(throws_error_naming([] { longformer_pattern(8, -1, {}, false); }, {"longformer_pattern", "radius (-1)"}));
  EXPECT_TRUE(throws_error_naming([] { longformer_pattern(8, 1, {2, 8}, false); },
                                  {"longformer_pattern", "globals names position 8", "n = 8"}));
  EXPECT_TRUE(throws_error_naming([] { bigbird_pattern(16, 0, 2, 1, 0); }, {"bigbird_pattern", "block (0)"}));
  EXPECT_TRUE(throws_error_naming([] { bigbird_pattern(18, 4, 2, 1, 0); },
                                  {"bigbird_pattern", "n (18)", "multiple of block (4)"}));
  EXPECT_TRUE(throws_error_naming([] { bigbird_pattern(16, 4, 5, 0, 0); }, {"bigbird_pattern", "global_blocks (5)", "4 blocks"}));
  // 6 blocks: g = 2, r = 2 needs 2 + 3 + 2 = 7.
  EXPECT_TRUE(throws_error_naming([] { bigbird_pattern(24, 4, 2, 2, 0); },
                                  {"bigbird_pattern", "random_blocks (2)", "global_blocks + 3 + random_blocks = 7", "6"}));
  EXPECT_NO_THROW(bigbird_pattern(28, 4, 2, 2, 0));
  EXPECT_NO_THROW(bigbird_pattern(8, 4, 2, 0, 0));  // no random blocks: any number of blocks
}

TEST(Ch03Validation, the_reference_names_a_pattern_or_layout_that_does_not_fit) {
  Rng rng(3);
  const Tensor3 q = rng.normal_tensor(2, 6, 4), k = rng.normal_tensor(2, 6, 4), v = rng.normal_tensor(2, 6, 4);
  EXPECT_TRUE(throws_error_naming([&] { ref::sparse_attention(q, k, v, {full_pattern(5, false)}); },
                                  {"sparse_attention", "patterns", "expected 6 x 6"}));
  EXPECT_TRUE(throws_error_naming(
      [&] { ref::sparse_attention(q, k, v, {full_pattern(6, false), full_pattern(6, true), full_pattern(6, true)}); },
      {"sparse_attention", "patterns holds 3 patterns"}));
  EXPECT_TRUE(throws_error_naming(
      [&] { ref::block_sparse_attention(q, k, v, {to_block_layout(full_pattern(7, false), 2, 2)}); },
      {"block_sparse_attention", "layouts", "expected 6 x 6"}));
  EXPECT_TRUE(throws_error_naming([&] { ref::sliding_window_attention(q, k, v, {-1, 0}); },
                                  {"sliding_window_attention", "window.left (-1)"}));
}

// ---------------------------------------------------------- the reference against chapter 00

// Head h of a [heads, seq, dim] tensor as a one-head tensor.
Tensor3 head_of(const Tensor3& t, std::size_t h) {
  Tensor3 one = Tensor3::from_shape({1, t.shape()[1], t.shape()[2]});
  for (std::size_t i = 0; i < t.shape()[1]; ++i)
    for (std::size_t c = 0; c < t.shape()[2]; ++c) one(0, i, c) = t(h, i, c);
  return one;
}

// ln sum_{j in S_i} e^{s_ij} in double, from the definition (-inf for an empty row).
double lse_oracle(const Tensor3& q, const Tensor3& k, std::size_t h, std::size_t i, const SparsePattern& p) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.shape()[2]));
  std::vector<double> s;
  for (std::size_t j = 0; j < k.shape()[1]; ++j) {
    if (!p.allows(i, j)) continue;
    double dot = 0;
    for (std::size_t c = 0; c < q.shape()[2]; ++c) dot += double{q(h, i, c)} * double{k(h, j, c)};
    s.push_back(scale * dot);
  }
  if (s.empty()) return -std::numeric_limits<double>::infinity();
  double m = s[0], sum = 0;
  for (double x : s) m = std::max(m, x);
  for (double x : s) sum += std::exp(x - m);
  return m + std::log(sum);
}

// ref::sparse_attention computes in double and rounds once, as the oracle does: the two differ
// by that rounding, at most half an ulp (2^-24 |o|); FLT_EPSILON allows a full ulp, and the
// absolute 1e-12 covers outputs near 0 (double-level differences in the sums).
const Tolerance kOneRounding{1e-12, FLT_EPSILON};

// Compares ref::sparse_attention over `patterns` (1 or one per head) with chapter 00's attention
// with the mask of each head's pattern: the independent double oracle and ref::scaled_dot_product_attention.
void expect_equals_masked_dense(const std::string& what, const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                const HeadPatterns& patterns, std::uint64_t seed) {
  const FlashOutput sparse = ref::sparse_attention(q, k, v, patterns);
  const std::size_t heads = q.shape()[0];
  for (std::size_t h = 0; h < heads; ++h) {
    const SparsePattern& p = pattern_of_head(patterns, h);
    AttentionConfig cfg;
    cfg.mask.allowed = p.to_mask();
    const Tensor3 qh = head_of(q, h), kh = head_of(k, h), vh = head_of(v, h);
    const Tensor3 got = head_of(sparse.out, h);
    const std::string name = what + ", head " + std::to_string(h);
    EXPECT_TRUE(matches(got, tvlab::testing::sdpa_oracle(qh, kh, vh, cfg), kOneRounding,
                        {name + " vs the double oracle", {"h", "i", "c"}, seed, "tvlab sparse --step",
                         "$o_i = \\sum_{j \\in S_i} \\mathrm{softmax}_j(s_{ij}) v_j$: the same as dense attention "
                         "with $-\\infty$ outside $S_i$"}));
    const Tensor3 dense = ref::scaled_dot_product_attention(qh, kh, vh, cfg);
    EXPECT_TRUE(matches(got, xt::xtensor<double, 3>(xt::cast<double>(dense)), kOneRounding,
                        {name + " vs ref::scaled_dot_product_attention (chapter 00)", {"h", "i", "c"}, seed}));
    DTensor2 lse = DTensor2::from_shape({1, q.shape()[1]});
    Tensor2 got_lse = Tensor2::from_shape({1, q.shape()[1]});
    for (std::size_t i = 0; i < q.shape()[1]; ++i) {
      lse(0, i) = lse_oracle(q, k, h, i, p);
      got_lse(0, i) = sparse.lse(h, i);
    }
    EXPECT_TRUE(matches(got_lse, lse, kOneRounding, {name + ", log-sum-exp", {"h", "i"}, seed}));
  }
}

TEST(Ch03Reference, sparse_attention_is_dense_attention_with_the_pattern_as_mask) {
  std::uint64_t seed = 3000;
  for (const auto& [name, p] : sample_patterns()) {
    if (p.seq_q != p.seq_k) continue;
    Rng rng(++seed);
    // Scores spread wide (std 3 per entry, 8 dims): softmaxes far from flat.
    const Tensor3 q = rng.normal_tensor(2, p.seq_q, 8, 0.0, 3.0), k = rng.normal_tensor(2, p.seq_k, 8, 0.0, 3.0),
                  v = rng.normal_tensor(2, p.seq_k, 8);
    expect_equals_masked_dense(name, q, k, v, {p}, seed);
  }
}

TEST(Ch03Reference, each_head_uses_its_own_pattern) {
  Rng rng(3100);
  const std::size_t n = 29;
  const Tensor3 q = rng.normal_tensor(3, n, 8, 0.0, 2.0), k = rng.normal_tensor(3, n, 8, 0.0, 2.0),
                v = rng.normal_tensor(3, n, 8);
  // Longformer's per-head dilation, and the Sparse Transformer's factorised heads.
  expect_equals_masked_dense("dilation 1, 2, 3 per head", q, k, v,
                             {dilated_window_pattern(n, 2, 1, false), dilated_window_pattern(n, 2, 2, false),
                              dilated_window_pattern(n, 2, 3, false)},
                             3100);
  expect_equals_masked_dense("strided heads", q, k, v,
                             {strided_pattern(n, 5, 0), strided_pattern(n, 5, 1), strided_pattern(n, 5, 2)}, 3100);
}

TEST(Ch03Reference, a_row_without_keys_gives_zero_and_minus_infinity) {
  Rng rng(3200);
  const std::size_t n = 9;
  const Tensor3 q = rng.normal_tensor(2, n, 4), k = rng.normal_tensor(2, n, 4), v = rng.normal_tensor(2, n, 4);
  Mask2 m = sliding_window_pattern(n, 1, 1).to_mask();
  for (std::size_t j = 0; j < n; ++j) m(4, j) = false;  // row 4 sees nothing
  const SparsePattern p = pattern_from_mask(m);
  const FlashOutput out = ref::sparse_attention(q, k, v, {p});
  for (std::size_t h = 0; h < 2; ++h) {
    for (std::size_t c = 0; c < 4; ++c) EXPECT_EQ(out.out(h, 4, c), 0.0f) << "head " << h << ", component " << c;
    EXPECT_EQ(out.lse(h, 4), -std::numeric_limits<float>::infinity());
  }
  expect_equals_masked_dense("row 4 fully masked", q, k, v, {p}, 3200);
}

TEST(Ch03Reference, block_layouts_give_the_same_attention_as_their_pattern) {
  Rng rng(3300);
  const SparsePattern p = longformer_pattern(37, 3, {5, 30}, false);
  const Tensor3 q = rng.normal_tensor(2, 37, 8), k = rng.normal_tensor(2, 37, 8), v = rng.normal_tensor(2, 37, 8);
  const FlashOutput by_rows = ref::sparse_attention(q, k, v, {p});
  const BlockLayout layout = to_block_layout(p, 8, 4);
  const FlashOutput by_blocks = ref::block_sparse_attention(q, k, v, {layout});
  EXPECT_EQ(by_blocks.out, by_rows.out);
  EXPECT_EQ(by_blocks.lse, by_rows.lse);
  EXPECT_EQ(by_blocks.tiles_computed, 2 * layout.blocks());
}

}  // namespace
}  // namespace tvlab::ch03
