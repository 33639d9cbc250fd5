// Chapter 03's suites over every backend of its registry: the sliding-window attention and the
// block-sparse attention against chapter 00's double-precision oracle with the same mask (output
// and log-sum-exp), the tiles the kernels visit, and bad input.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "../common/attention_oracle.hpp"
#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "tvlab/core/attention_patterns.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/opt/sparse_attention.hpp"

namespace tvlab::sparse {
namespace {

using tvlab::testing::matches;
using tvlab::testing::reduction_rtol;
using tvlab::testing::throws_error_naming;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct WindowCase {
  const char* label;
  std::size_t heads, seq_q, seq_k, head_dim;
  long long left, right;
};
void PrintTo(const WindowCase& c, std::ostream* out) { *out << c.label; }

class SlidingWindowCases : public ::testing::TestWithParam<std::tuple<Backend, WindowCase>> {};

// o_i = softmax over the keys i' - w_l <= j <= i' + w_r of scale q_i . k_j, times v: chapter 00's
// attention with the same window (its oracle computes in double).
TEST_P(SlidingWindowCases, matches_the_masked_oracle) {
  const auto& [backend, c] = GetParam();
  TVLAB_EXERCISE(backend, "03.3");
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const unsigned long long seed = 300 + c.seq_q * 7 + c.seq_k + static_cast<unsigned long long>(c.left);
  Rng rng(seed);
  const Tensor3 q = rng.normal_tensor(c.heads, c.seq_q, c.head_dim), k = rng.normal_tensor(c.heads, c.seq_k, c.head_dim),
                v = rng.normal_tensor(c.heads, c.seq_k, c.head_dim);
  const SlidingWindow window{c.left, c.right};
  AttentionConfig cfg;
  cfg.mask.window = window;
  const DTensor3 expected = tvlab::testing::sdpa_oracle(q, k, v, cfg);
  // A weighted sum of at most seq_k values after a dot product of length head_dim, in float.
  const Tolerance tol{1e-5, reduction_rtol(c.seq_k + c.head_dim)};
  EXPECT_TRUE(matches(backend.sliding_window(q, k, v, window, {}).out, expected, tol,
                      {std::string("sliding_window_attention, ") + c.label, {"h", "i", "c"}, seed,
                       std::string("tvlab ") + TVLAB_CHAPTER_NAME + " --step --backend " + backend.name,
                       "$o_i = \\sum_{j \\in S_i} \\mathrm{softmax}_j(s_{ij})\\, v_j$ over "
                       "$S_i = [i' - w_l, i' + w_r] \\cap [0, n_k)$, $i' = i + n_k - n_q$"}));
}

const WindowCase kWindowCases[] = {
    {"seq 1, window 0", 1, 1, 1, 4, 0, 0},
    {"seq 37, radius 3", 2, 37, 37, 8, 3, 3},
    {"seq 130, causal window of 17", 2, 130, 130, 16, 16, 0},
    {"seq 65, window wider than the sequence", 1, 65, 65, 8, 100, 100},
    {"decode-like, 5 queries over 70 keys", 2, 5, 70, 8, 9, 0},
    {"seq 1200, radius 600 (a tile's keys span more than one run of 1024)", 1, 1200, 1200, 8, 600, 600},
};
INSTANTIATE_TEST_SUITE_P(Ch03, SlidingWindowCases,
                         ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::sliding_window)),
                                            ::testing::ValuesIn(kWindowCases)),
                         tvlab::testing::ImplCaseName());

class SlidingWindowErrors : public ::testing::TestWithParam<Backend> {};

TEST_P(SlidingWindowErrors, rejects_bad_input_naming_the_parameter) {
  const Backend& backend = GetParam();
  const Tensor3 x = xt::ones<float>({1, 4, 8});
  const char* fn = "sliding_window_attention";
  EXPECT_TRUE(throws_error_naming([&] { backend.sliding_window(x, x, x, {-1, 0}, {}); }, {fn, "window.left"}));
  EXPECT_TRUE(throws_error_naming([&] { backend.sliding_window(x, x, x, {2, -3}, {}); }, {fn, "window.right"}));
  // The queries are the last seq_q of the seq_k positions: more queries than keys has no meaning.
  const Tensor3 longer = xt::ones<float>({1, 6, 8});
  EXPECT_TRUE(throws_error_naming([&] { backend.sliding_window(longer, x, x, {2, 2}, {}); }, {fn, "seq_q"}));
  const Tensor3 other_dim = xt::ones<float>({1, 4, 5});
  EXPECT_TRUE(throws_error_naming([&] { backend.sliding_window(x, other_dim, x, {2, 2}, {}); }, {fn, "k", "head_dim"}));
  EXPECT_TRUE(throws_error_naming([&] { backend.sliding_window(x, x, x, {2, 2}, -1.0); }, {fn, "scale"}));
}

// Exercise 03.3 is the kernel's inner loop: the checks before it are given, and pass with the
// stub, so the exercise program has nothing to grade here (the chapter's program checks them all).
std::vector<Backend> checking_input(const std::vector<Backend>& entries) {
  return tvlab::testing::exercise_program() ? std::vector<Backend>{} : entries;
}
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SlidingWindowErrors);  // not graded in the exercise program
INSTANTIATE_TEST_SUITE_P(Ch03, SlidingWindowErrors,
                         ::testing::ValuesIn(checking_input(tvlab::testing::under_test(backends(), &Backend::sliding_window))),
                         tvlab::testing::ImplName());

// ------------------------------------------------------------------------------ block-sparse

// A layout to run, and the mask it means (true: query i may attend to key j), one per head or one
// for every head. The mask is written out here from the definitions (a pattern's key lists, a
// layout's blocks and bytes), not by the library's conversions, so a case also checks
// to_block_layout.
struct LayoutCase {
  HeadLayouts layouts;
  std::vector<Mask2> allowed;
};

// Row i of a pattern lists the keys i may attend to.
Mask2 mask_of(const SparsePattern& p) {
  Mask2 m = xt::zeros<bool>({p.seq_q, p.seq_k});
  for (std::size_t i = 0; i < p.seq_q; ++i)
    for (std::size_t e = p.row_start[i]; e < p.row_start[i + 1]; ++e) m(i, p.keys[e]) = true;
  return m;
}

// A layout allows every entry inside the matrix of a full block, and the entries of a partial
// block whose mask byte is 1 (bytes past the matrix's edge mean nothing).
Mask2 mask_of(const BlockLayout& layout) {
  Mask2 m = xt::zeros<bool>({layout.seq_q, layout.seq_k});
  for (std::size_t qb = 0; qb + 1 < layout.block_start.size(); ++qb)
    for (std::size_t b = layout.block_start[qb]; b < layout.block_start[qb + 1]; ++b)
      for (std::size_t r = 0; r < layout.block_q; ++r)
        for (std::size_t c = 0; c < layout.block_k; ++c) {
          const std::size_t i = qb * layout.block_q + r, j = layout.key_blocks[b] * layout.block_k + c;
          if (i >= layout.seq_q || j >= layout.seq_k) continue;
          const bool byte = layout.partial[b] < 0 ||
                            layout.masks[static_cast<std::size_t>(layout.partial[b]) * layout.block_q * layout.block_k +
                                         r * layout.block_k + c] != 0;
          if (byte) m(i, j) = true;
        }
  return m;
}

// Named patterns cut into tiles of bq x bk.
LayoutCase from_patterns(const HeadPatterns& patterns, std::size_t bq, std::size_t bk) {
  LayoutCase c;
  for (const SparsePattern& p : patterns) {
    c.layouts.push_back(to_block_layout(p, bq, bk));
    c.allowed.push_back(mask_of(p));
  }
  return c;
}

LayoutCase from_layouts(const HeadLayouts& layouts) {
  LayoutCase c{layouts, {}};
  for (const BlockLayout& layout : layouts) c.allowed.push_back(mask_of(layout));
  return c;
}

// A BigBird-like layout written by hand (BigBird's ITC structure, Zaheer et al. 2020): n = 9
// blocks of 8, blocks 0 and 8 global (they see every block, every block sees them), every other
// query block its 3-block window and 2 random blocks drawn from the rest with a seeded Rng.
BlockLayout bigbird_like_layout(std::uint64_t seed) {
  constexpr std::size_t blocks = 9, b = 8, random = 2;
  BlockLayout layout{.seq_q = blocks * b, .seq_k = blocks * b, .block_q = b, .block_k = b};
  Rng rng(seed);
  layout.block_start.push_back(0);
  for (std::size_t qb = 0; qb < blocks; ++qb) {
    std::vector<std::uint32_t> row;
    const bool global = qb == 0 || qb == blocks - 1;
    for (std::uint32_t kb = 0; kb < blocks; ++kb) {
      const bool in_window = kb + 1 >= qb && kb <= qb + 1;
      if (global || in_window || kb == 0 || kb == blocks - 1) row.push_back(kb);
    }
    if (!global) {
      std::vector<std::uint32_t> others;
      for (std::uint32_t kb = 0; kb < blocks; ++kb)
        if (std::find(row.begin(), row.end(), kb) == row.end()) others.push_back(kb);
      for (std::size_t r = 0; r < random && !others.empty(); ++r) {
        const std::size_t pick = rng.next_u64() % others.size();
        row.push_back(others[pick]);
        others.erase(others.begin() + static_cast<std::ptrdiff_t>(pick));
      }
    }
    std::sort(row.begin(), row.end());
    for (std::uint32_t kb : row) {
      layout.key_blocks.push_back(kb);
      layout.partial.push_back(-1);
    }
    layout.block_start.push_back(layout.key_blocks.size());
  }
  return layout;
}

// 20 queries over 30 keys in blocks of 8 (3 x 4 blocks, the last of each partly outside the
// matrix): query block 0 lists key block 0 (full) and key block 3 (partial, keys 24..29, with
// bytes set for the keys 30 and 31 past the edge, which must be ignored); query block 1 lists
// nothing (its 8 rows see no key: output 0); query block 2 (rows 16..19 and 4 rows past the edge,
// their bytes set) lists key block 1, partial, where row 17 sees none of its keys.
BlockLayout holes_layout() {
  BlockLayout layout{.seq_q = 20, .seq_k = 30, .block_q = 8, .block_k = 8};
  layout.block_start = {0, 2, 2, 3};
  layout.key_blocks = {0, 3, 1};
  layout.partial = {-1, 0, 1};
  layout.masks.assign(2 * 64, 0);
  for (std::size_t r = 0; r < 8; ++r)
    for (std::size_t c = 0; c < 8; ++c) {
      layout.masks[r * 8 + c] = (r + c) % 3 == 0 || c >= 6 ? 1 : 0;       // key block 3: keys 30, 31 past the edge
      layout.masks[64 + r * 8 + c] = r == 1 ? 0 : (r >= 4 || c % 2 == 0);  // rows 20..23 past the edge
    }
  return layout;
}

// A random boolean mask (density 0.3) with a row that sees nothing: a general sparse pattern whose
// blocks are mostly partial.
LayoutCase random_mask_case(std::size_t seq_q, std::size_t seq_k, std::size_t bq, std::size_t bk) {
  Rng rng(77);
  Mask2 allowed = xt::zeros<bool>({seq_q, seq_k});
  for (std::size_t i = 0; i < seq_q; ++i)
    for (std::size_t j = 0; j < seq_k; ++j) allowed(i, j) = i != 5 && rng.uniform() < 0.3;
  return {{to_block_layout(pattern_from_mask(allowed), bq, bk)}, {allowed}};
}

struct BlockSparseCase {
  const char* label;
  std::size_t heads, seq_q, seq_k, head_dim, head_dim_v;
  float q_scale;  // q is drawn from N(0, q_scale^2): 3 makes the softmax sharp
  std::function<LayoutCase()> make;
};
void PrintTo(const BlockSparseCase& c, std::ostream* out) { *out << c.label; }

const BlockSparseCase kBlockSparseCases[] = {
    {"window radius 5, n 37, blocks 8 x 8", 2, 37, 37, 16, 16, 1,
     [] { return from_patterns({sliding_window_pattern(37, 5, 5)}, 8, 8); }},
    {"causal window of 16 keys, n 100, blocks 16 x 16, large scores", 2, 100, 100, 32, 32, 3,
     [] { return from_patterns({sliding_window_pattern(100, 15, 0)}, 16, 16); }},
    {"dilated window radius 3, dilation 1 2 3 per head, n 50, blocks 8 x 8", 3, 50, 50, 8, 8, 1,
     [] {
       return from_patterns({dilated_window_pattern(50, 3, 1, false), dilated_window_pattern(50, 3, 2, false),
                             dilated_window_pattern(50, 3, 3, false)},
                            8, 8);
     }},
    {"strided stride 6, its two heads, n 45, blocks 7 x 5, head_dim_v 24", 2, 45, 45, 16, 24, 1,
     [] { return from_patterns({strided_pattern(45, 6, 0), strided_pattern(45, 6, 1)}, 7, 5); }},
    {"fixed block 8, 2 summary columns, merged, n 64, blocks 16 x 16, head_dim 64", 1, 64, 64, 64, 64, 1,
     [] { return from_patterns({fixed_pattern(64, 8, 2, 2)}, 16, 16); }},
    {"Longformer radius 4, globals 0 17 40, n 50, blocks 8 x 8", 2, 50, 50, 16, 16, 1,
     [] { return from_patterns({longformer_pattern(50, 4, {0, 17, 40}, false)}, 8, 8); }},
    {"BigBird-like, 9 blocks of 8, 2 global, 3-block window, 2 random, per head", 2, 72, 72, 16, 16, 1,
     [] { return from_layouts({bigbird_like_layout(1), bigbird_like_layout(2)}); }},
    {"per-head tiles, 4 x 4 and 16 x 32, window radius 6, n 45", 2, 45, 45, 8, 8, 1,
     [] {
       const SparsePattern p = sliding_window_pattern(45, 6, 6);
       return LayoutCase{{to_block_layout(p, 4, 4), to_block_layout(p, 16, 32)}, {mask_of(p)}};
     }},
    {"an empty query block, a row with no key, bytes past the edge, 20 x 30", 2, 20, 30, 8, 8, 1,
     [] { return from_layouts({holes_layout()}); }},
    {"blocks 100 x 70 (several row groups and key chunks), causal, n 130", 1, 130, 130, 16, 16, 1,
     [] { return from_patterns({full_pattern(130, true)}, 100, 70); }},
    {"blocks 32 x 1050 (wider than a run of 1024 keys), causal, n 1100", 1, 1100, 1100, 8, 8, 1,
     [] { return from_patterns({full_pattern(1100, true)}, 32, 1050); }},
    {"random mask, 40 queries over 90 keys, blocks 16 x 32", 2, 40, 90, 16, 16, 1,
     [] { return random_mask_case(40, 90, 16, 32); }},
    {"one token, blocks 64 x 64", 1, 1, 1, 4, 4, 1, [] { return from_patterns({full_pattern(1, false)}, 64, 64); }},
};

// Tiles of head h's grid that hold at least one allowed pair: what a block-sparse kernel must visit
// (each case lists only such blocks).
std::size_t nonempty_tiles(const BlockLayout& layout, const Mask2& allowed) {
  std::size_t count = 0;
  for (std::size_t qb = 0; qb < layout.query_blocks(); ++qb)
    for (std::size_t kb = 0; kb < layout.key_block_count(); ++kb) {
      bool any = false;
      for (std::size_t i = qb * layout.block_q; i < std::min(layout.seq_q, (qb + 1) * layout.block_q); ++i)
        for (std::size_t j = kb * layout.block_k; j < std::min(layout.seq_k, (kb + 1) * layout.block_k); ++j)
          any = any || allowed(i, j);
      count += any ? 1 : 0;
    }
  return count;
}

Tensor3 head_of(const Tensor3& x, std::size_t h) { return xt::view(x, xt::range(h, h + 1), xt::all(), xt::all()); }

class BlockSparseCases : public ::testing::TestWithParam<std::tuple<Backend, BlockSparseCase>> {};

// o_i = softmax over j in S_i of scale q_i . k_j, times v, with S_i the layout's allowed entries of
// row i: chapter 00's attention oracle (double) with that boolean mask, head by head; the
// log-sum-exp L_i = ln sum_{j in S_i} e^{s_ij} (-inf for a row with no key, whose output is 0).
TEST_P(BlockSparseCases, matches_the_masked_oracle_with_its_log_sum_exp) {
  const auto& [backend, c] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const LayoutCase lc = c.make();
  const unsigned long long seed = 500 + c.seq_q * 3 + c.seq_k;
  Rng rng(seed);
  const Tensor3 q = rng.normal_tensor(c.heads, c.seq_q, c.head_dim, 0.0, c.q_scale);
  const Tensor3 k = rng.normal_tensor(c.heads, c.seq_k, c.head_dim), v = rng.normal_tensor(c.heads, c.seq_k, c.head_dim_v);
  const FlashOutput got = backend.block_sparse(q, k, v, lc.layouts, {});

  DTensor3 out = xt::zeros<double>({c.heads, c.seq_q, c.head_dim_v});
  DTensor2 lse = xt::zeros<double>({c.heads, c.seq_q});
  double magnitude = 0, max_v = xt::amax(xt::abs(v))();
  std::size_t tiles = 0, grid = 0;
  for (std::size_t h = 0; h < c.heads; ++h) {
    AttentionConfig cfg;
    cfg.mask.allowed = lc.allowed.size() == 1 ? lc.allowed[0] : lc.allowed[h];
    const Tensor3 qh = head_of(q, h), kh = head_of(k, h), vh = head_of(v, h);
    xt::view(out, h, xt::all(), xt::all()) = xt::view(tvlab::testing::sdpa_oracle(qh, kh, vh, cfg), 0, xt::all(), xt::all());
    const DTensor2 s = tvlab::testing::masked_scores_oracle(qh, kh, cfg, 0);
    for (std::size_t i = 0; i < c.seq_q; ++i) {
      double m = kNegInf, sum = 0;
      for (std::size_t j = 0; j < c.seq_k; ++j) m = std::max(m, s(i, j));
      for (std::size_t j = 0; j < c.seq_k && m != kNegInf; ++j) sum += std::exp(s(i, j) - m);
      lse(h, i) = m == kNegInf ? m : m + std::log(sum);
    }
    magnitude = std::max(magnitude, tvlab::testing::score_magnitude(qh, kh, cfg));
    const BlockLayout& layout = layout_of_head(lc.layouts, h);
    tiles += nonempty_tiles(layout, *cfg.mask.allowed);
    grid += layout.query_blocks() * layout.key_block_count();
  }
  // As chapters 00 and 04: a score's float error is at most rtol M (M = max scale sum_c |q_ic k_jc|),
  // which moves an output by at most 2 rtol M max|v|, and the weighted sum of at most seq_k values
  // adds rtol max|v| (attention_tolerance, rtol = 10 eps sqrt(max(head_dim, seq_k))); L_i = m_i + ln l_i
  // moves by the score error plus the rounding of ln l_i: rtol (M + 1).
  const double rtol = reduction_rtol(std::max(c.head_dim, c.seq_k));
  const Tolerance tol{attention_tolerance(c.head_dim, c.seq_k, magnitude, max_v), rtol};
  const std::string explore = std::string("tvlab ") + TVLAB_CHAPTER_NAME + " --step --backend " + backend.name;
  EXPECT_TRUE(matches(got.out, out, tol,
                      {std::string("block_sparse_attention, ") + c.label, {"h", "i", "c"}, seed, explore,
                       "for each listed key block of the query block: $m' = \\max(m, \\max_j s_{ij})$, "
                       "$l' = e^{m - m'} l + \\sum_j e^{s_{ij} - m'}$, $O' = e^{m - m'} O + \\sum_j e^{s_{ij} - m'} v_j$ "
                       "over the keys the block allows row i (a partial block's mask byte 1; nothing past the "
                       "matrix's edge); $O / l$ at the end, 0 for a row that saw no key"}));
  EXPECT_TRUE(matches(got.lse, lse, {rtol * (magnitude + 1), 0.0},
                      {std::string("block_sparse_attention's log-sum-exp, ") + c.label, {"h", "i"}, seed, explore,
                       "$L_i = m_i + \\ln l_i$ after the last block, $-\\infty$ for a row with no key"}));
  EXPECT_EQ(got.tiles_computed, tiles) << c.label << ": tiles_computed counts the listed (query block, key block) "
                                       << "pairs, summed over heads: every tile that holds an allowed pair";
  EXPECT_EQ(got.tiles_computed + got.tiles_skipped, grid)
      << c.label << ": tiles_skipped counts the other tiles of each head's grid of query blocks x key blocks";
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(BlockSparseCases);  // not an exercise
INSTANTIATE_TEST_SUITE_P(Ch03, BlockSparseCases,
                         ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::block_sparse)),
                                            ::testing::ValuesIn(kBlockSparseCases)),
                         tvlab::testing::ImplCaseName());

class BlockSparseErrors : public ::testing::TestWithParam<Backend> {};

TEST_P(BlockSparseErrors, rejects_bad_input_naming_the_parameter) {
  const Backend& backend = GetParam();
  const char* fn = "block_sparse_attention";
  const Tensor3 x = xt::ones<float>({3, 16, 8});
  const BlockLayout layout = to_block_layout(sliding_window_pattern(16, 2, 2), 4, 4);
  // A layout of 12 x 16 for 16 queries.
  const HeadLayouts wrong_shape{to_block_layout(sliding_window_pattern(12, 2, 2), 4, 4)};
  EXPECT_TRUE(throws_error_naming([&] { backend.block_sparse(x, x, x, wrong_shape, {}); }, {fn, "layouts", "12"}));
  // Two layouts for three heads: neither one shared nor one per head.
  EXPECT_TRUE(throws_error_naming([&] { backend.block_sparse(x, x, x, {layout, layout}, {}); }, {fn, "layouts", "2"}));
  EXPECT_TRUE(throws_error_naming([&] { backend.block_sparse(x, x, x, {}, {}); }, {fn, "layouts"}));
  BlockLayout beyond = layout;
  beyond.key_blocks.back() = 4;  // 16 keys in blocks of 4: key blocks 0..3
  EXPECT_TRUE(throws_error_naming([&] { backend.block_sparse(x, x, x, {beyond}, {}); }, {fn, "layouts", "key block 4"}));
  BlockLayout zero = layout;
  zero.block_q = 0;
  EXPECT_TRUE(throws_error_naming([&] { backend.block_sparse(x, x, x, {zero}, {}); }, {fn, "layouts", "block_q"}));
  BlockLayout mask_index = layout;
  mask_index.partial[0] = static_cast<std::int32_t>(layout.partial_blocks());
  EXPECT_TRUE(throws_error_naming([&] { backend.block_sparse(x, x, x, {mask_index}, {}); }, {fn, "layouts", "mask"}));
  const Tensor3 other_dim = xt::ones<float>({3, 16, 5});
  EXPECT_TRUE(throws_error_naming([&] { backend.block_sparse(x, other_dim, x, {layout}, {}); }, {fn, "k", "head_dim"}));
  const Tensor3 wide = xt::ones<float>({3, 16, 257});
  EXPECT_TRUE(throws_error_naming([&] { backend.block_sparse(wide, wide, x, {layout}, {}); }, {fn, "head_dim"}));
  EXPECT_TRUE(throws_error_naming([&] { backend.block_sparse(x, x, x, {layout}, 0.0); }, {fn, "scale"}));
  Tensor3 nan = x;
  nan(1, 2, 3) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { backend.block_sparse(x, x, nan, {layout}, {}); }, {fn, "v"}));
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(BlockSparseErrors);  // not an exercise
INSTANTIATE_TEST_SUITE_P(Ch03, BlockSparseErrors,
                         ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::block_sparse)),
                         tvlab::testing::ImplName());

}  // namespace
}  // namespace tvlab::sparse
