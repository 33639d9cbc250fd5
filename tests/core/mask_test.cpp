// The attention mask specification (tvlab::AttentionMask): its member functions against
// brute-force definitions written out here, the two causal alignments on the documents'
// examples, windows, the ranges a tiled loop may skip to, validation and require_supported.

#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../common/testing.hpp"
#include "../common/attention_oracle.hpp"
#include "tvlab/core/attention_mask.hpp"

namespace tvlab {
namespace {

using tvlab::testing::throws_error_naming;

// Every combination of structural parts the brute-force tests sweep: causal or not, both
// alignments, no window, one-sided and two-sided windows, a zero-width window (the diagonal
// only) and widths that limit nothing (including LLONG_MAX, which must not overflow).
std::vector<AttentionMask> structural_masks() {
  const std::vector<std::optional<SlidingWindow>> windows = {
      std::nullopt, SlidingWindow{0, 0}, SlidingWindow{2, 0}, SlidingWindow{0, 3},
      SlidingWindow{2, 3}, SlidingWindow{100, 100}, SlidingWindow{LLONG_MAX, LLONG_MAX}};
  std::vector<AttentionMask> masks;
  for (const bool causal : {false, true})
    for (const CausalAlign align : {CausalAlign::top_left, CausalAlign::bottom_right})
      for (const auto& window : windows) {
        AttentionMask m;
        m.causal = causal;
        m.causal_align = align;
        m.window = window;
        masks.push_back(m);
      }
  return masks;
}

std::string describe(const AttentionMask& m, std::size_t n_q, std::size_t n_k) {
  std::string s = std::string(m.causal ? "causal, " : "") +
                  (m.causal_align == CausalAlign::top_left ? "top_left" : "bottom_right") + ", n_q " +
                  std::to_string(n_q) + ", n_k " + std::to_string(n_k);
  if (m.window) s += ", window {" + std::to_string(m.window->left) + ", " + std::to_string(m.window->right) + "}";
  return s;
}

// The sizes swept: the bottom-right alignment needs n_q <= n_k, top-left takes any.
std::vector<std::pair<std::size_t, std::size_t>> sizes_for(const AttentionMask& m) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t n_q : {1, 3, 5, 8})
    for (std::size_t n_k : {1, 4, 5, 9})
      if (m.causal_align == CausalAlign::top_left || !m.uses_positions() || n_q <= n_k) out.push_back({n_q, n_k});
  return out;
}

TEST(AttentionMask, allows_follows_the_definition) {
  for (const AttentionMask& m : structural_masks())
    for (const auto& [n_q, n_k] : sizes_for(m))
      for (std::size_t i = 0; i < n_q; ++i)
        for (std::size_t j = 0; j < n_k; ++j)
          EXPECT_EQ(m.allows(i, j, n_q, n_k), testing::mask_allows_oracle(m, n_q, n_k, i, j))
              << describe(m, n_q, n_k) << ", query " << i << ", key " << j;
  // The boolean mask is one more condition on top of the structural ones.
  AttentionMask m;
  m.causal = true;
  m.allowed = Mask2{{true, false, true}, {false, true, true}};
  EXPECT_TRUE(m.allows(0, 0, 2, 3));
  EXPECT_FALSE(m.allows(0, 1, 2, 3));  // hidden by the boolean mask
  EXPECT_FALSE(m.allows(0, 2, 2, 3));  // i' = 0 + 3 - 2 = 1 < 2: hidden by the causal rule
  EXPECT_FALSE(m.allows(1, 0, 2, 3));
  EXPECT_TRUE(m.allows(1, 2, 2, 3));
}

TEST(AttentionMask, causal_alignments_reproduce_the_documented_examples) {
  auto pattern = [](const AttentionMask& m, std::size_t n_q, std::size_t n_k) {
    std::vector<std::vector<int>> rows(n_q, std::vector<int>(n_k));
    for (std::size_t i = 0; i < n_q; ++i)
      for (std::size_t j = 0; j < n_k; ++j) rows[i][j] = m.allows(i, j, n_q, n_k) ? 1 : 0;
    return rows;
  };
  AttentionMask top_left, bottom_right;
  top_left.causal = bottom_right.causal = true;
  top_left.causal_align = CausalAlign::top_left;
  // PyTorch, torch.nn.attention.bias.causal_upper_left((3, 4)) == torch.tril(torch.ones(3, 4)):
  // [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]] (what scaled_dot_product_attention's is_causal builds).
  EXPECT_EQ(pattern(top_left, 3, 4), (std::vector<std::vector<int>>{{1, 0, 0, 0}, {1, 1, 0, 0}, {1, 1, 1, 0}}));
  // FlashAttention's flash_attn_func docstring, seqlen_q = 2, seqlen_k = 5: "aligned to the bottom
  // right corner": [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]].
  EXPECT_EQ(pattern(bottom_right, 2, 5), (std::vector<std::vector<int>>{{1, 1, 1, 1, 0}, {1, 1, 1, 1, 1}}));
  // Top-left with more queries than keys: the later rows see every key.
  EXPECT_EQ(pattern(top_left, 4, 2), (std::vector<std::vector<int>>{{1, 0}, {1, 1}, {1, 1}, {1, 1}}));
  // Square: the two agree.
  EXPECT_EQ(pattern(top_left, 4, 4), pattern(bottom_right, 4, 4));
  // The position i' itself.
  EXPECT_EQ(top_left.query_position(1, 2, 5), 1);
  EXPECT_EQ(bottom_right.query_position(1, 2, 5), 4);
}

TEST(AttentionMask, windows_keep_the_keys_between_i_minus_left_and_i_plus_right) {
  AttentionMask m;
  m.window = SlidingWindow{2, 1};
  // n = 6, square: row 3 sees keys 1, 2, 3, 4.
  for (std::size_t j = 0; j < 6; ++j) EXPECT_EQ(m.allows(3, j, 6, 6), j >= 1 && j <= 4) << "key " << j;
  // With causal the right width no longer matters: keys 1, 2, 3 (Mistral's window of 3 keys).
  m.causal = true;
  for (std::size_t j = 0; j < 6; ++j) EXPECT_EQ(m.allows(3, j, 6, 6), j >= 1 && j <= 3) << "key " << j;
  // The window follows the alignment: 2 queries over 6 keys, bottom-right, row 0 sits at i' = 4.
  m.causal = false;
  EXPECT_EQ(m.key_range(0, 2, 6), (IndexRange{2, 6}));
  m.causal_align = CausalAlign::top_left;  // row 0 at i' = 0: keys 0 and 1
  EXPECT_EQ(m.key_range(0, 2, 6), (IndexRange{0, 2}));
}

// The structural keys of row i by brute force: {j : causal and window allow j}.
std::vector<std::size_t> visible_keys(const AttentionMask& m, std::size_t n_q, std::size_t n_k, std::size_t i) {
  std::vector<std::size_t> keys;
  for (std::size_t j = 0; j < n_k; ++j)
    if (testing::mask_allows_oracle(m, n_q, n_k, i, j)) keys.push_back(j);
  return keys;
}

::testing::AssertionResult range_is(const IndexRange& got, const std::vector<std::size_t>& indices) {
  if (indices.empty()) {
    if (got.empty()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "expected an empty range, got [" << got.begin << ", " << got.end << ")";
  }
  for (std::size_t t = 1; t < indices.size(); ++t)
    if (indices[t] != indices[t - 1] + 1) return ::testing::AssertionFailure() << "the brute-force set is not contiguous";
  if (got.begin == indices.front() && got.end == indices.back() + 1) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected [" << indices.front() << ", " << indices.back() + 1 << "), got ["
                                       << got.begin << ", " << got.end << ")";
}

TEST(AttentionMask, key_range_is_exactly_the_keys_the_structural_parts_leave) {
  for (const AttentionMask& m : structural_masks())
    for (const auto& [n_q, n_k] : sizes_for(m)) {
      IndexRange previous{0, 0};
      for (std::size_t i = 0; i < n_q; ++i) {
        const IndexRange r = m.key_range(i, n_q, n_k);
        EXPECT_TRUE(range_is(r, visible_keys(m, n_q, n_k, i))) << describe(m, n_q, n_k) << ", row " << i;
        EXPECT_LE(r.begin, r.end);
        EXPECT_LE(r.end, n_k);
        if (i > 0 && !r.empty() && !previous.empty()) {  // both ends never decrease
          EXPECT_GE(r.begin, previous.begin) << describe(m, n_q, n_k) << ", row " << i;
          EXPECT_GE(r.end, previous.end) << describe(m, n_q, n_k) << ", row " << i;
        }
        previous = r;
      }
    }
}

TEST(AttentionMask, ranges_of_tiles_are_the_unions_of_their_rows_and_keys) {
  for (const AttentionMask& m : structural_masks())
    for (const auto& [n_q, n_k] : sizes_for(m)) {
      for (std::size_t first = 0; first < n_q; ++first)
        for (std::size_t last = first + 1; last <= n_q; ++last) {
          std::vector<bool> seen(n_k, false);
          for (std::size_t i = first; i < last; ++i)
            for (std::size_t j : visible_keys(m, n_q, n_k, i)) seen[j] = true;
          std::vector<std::size_t> keys;
          for (std::size_t j = 0; j < n_k; ++j)
            if (seen[j]) keys.push_back(j);
          EXPECT_TRUE(range_is(m.key_range_of_rows(first, last, n_q, n_k), keys))
              << describe(m, n_q, n_k) << ", rows [" << first << ", " << last << ")";
        }
      // query_range(j): the rows whose keys include j; query_range_of_keys: their union.
      for (std::size_t j = 0; j < n_k; ++j) {
        std::vector<std::size_t> rows;
        for (std::size_t i = 0; i < n_q; ++i)
          if (testing::mask_allows_oracle(m, n_q, n_k, i, j)) rows.push_back(i);
        EXPECT_TRUE(range_is(m.query_range(j, n_q, n_k), rows)) << describe(m, n_q, n_k) << ", key " << j;
      }
      for (std::size_t first = 0; first < n_k; ++first)
        for (std::size_t last = first + 1; last <= n_k; ++last) {
          std::vector<std::size_t> rows;
          for (std::size_t i = 0; i < n_q; ++i)
            for (std::size_t j = first; j < last; ++j)
              if (testing::mask_allows_oracle(m, n_q, n_k, i, j)) {
                rows.push_back(i);
                break;
              }
          EXPECT_TRUE(range_is(m.query_range_of_keys(first, last, n_q, n_k), rows))
              << describe(m, n_q, n_k) << ", keys [" << first << ", " << last << ")";
        }
    }
}

TEST(AttentionMask, score_bias_adds_the_bias_and_alibi_at_the_aligned_position) {
  AttentionMask m;
  EXPECT_EQ(m.score_bias(0, 1, 2, 3, 5), 0.0);  // nothing to add
  m.bias = Tensor2{{0.5f, -1.0f, 0.0f, 2.0f, -INFINITY}, {1.0f, 1.5f, -2.5f, 0.25f, 0.0f}};
  m.alibi_slopes = DTensor1{0.5, 0.125};
  for (const CausalAlign align : {CausalAlign::bottom_right, CausalAlign::top_left}) {
    m.causal_align = align;
    for (std::size_t h = 0; h < 2; ++h)
      for (std::size_t i = 0; i < 2; ++i)
        for (std::size_t j = 0; j < 5; ++j) {
          // b_ij - m_h |i' - j|, i' = i + 3 (bottom right, n_k - n_q = 3) or i (top left).
          const double position = static_cast<double>(i) + (align == CausalAlign::bottom_right ? 3.0 : 0.0);
          const double expected = static_cast<double>(m.bias.value()(i, j)) -
                                  m.alibi_slopes.value()(h) * std::fabs(position - static_cast<double>(j));
          EXPECT_EQ(m.score_bias(h, i, j, 2, 5), expected) << "h " << h << ", i " << i << ", j " << j;
        }
  }
  EXPECT_EQ(m.score_bias(1, 0, 4, 2, 5), -INFINITY);  // a -inf bias forbids whatever ALiBi adds
}

TEST(AttentionMask, predicates) {
  AttentionMask m;
  EXPECT_TRUE(m.is_none());
  EXPECT_FALSE(m.uses_positions());
  m.bias = Tensor2(xt::zeros<float>({1, 1}));
  EXPECT_FALSE(m.is_none());
  EXPECT_FALSE(m.uses_positions());  // an explicit [seq_q, seq_k] matrix needs no alignment
  for (int part = 0; part < 3; ++part) {
    AttentionMask p;
    if (part == 0) p.causal = true;
    if (part == 1) p.window = SlidingWindow{1, 1};
    if (part == 2) p.alibi_slopes = DTensor1{0.5};
    EXPECT_TRUE(p.uses_positions()) << "part " << part;
  }
}

TEST(AttentionMask, validation_names_the_field) {
  const char* fn = "attention";
  auto check = [&](const AttentionMask& m, std::size_t heads, std::size_t n_q, std::size_t n_k) {
    return [=] { validate_attention_mask(fn, heads, n_q, n_k, m); };
  };
  AttentionMask m;
  m.allowed = Mask2(xt::ones<bool>({3, 4}));
  EXPECT_TRUE(throws_error_naming(check(m, 1, 3, 5), {fn, "mask.allowed", "[3, 4]", "[3, 5]"}));
  m = {};
  m.bias = Tensor2(xt::zeros<float>({2, 5}));
  EXPECT_TRUE(throws_error_naming(check(m, 1, 3, 5), {fn, "mask.bias", "[2, 5]", "[3, 5]"}));
  m.bias = Tensor2(xt::zeros<float>({3, 5}));
  (*m.bias)(1, 1) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming(check(m, 1, 3, 5), {fn, "mask.bias", "nan"}));
  (*m.bias)(1, 1) = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws_error_naming(check(m, 1, 3, 5), {fn, "mask.bias", "inf"}));
  (*m.bias)(1, 1) = -std::numeric_limits<float>::infinity();  // -inf forbids: valid
  EXPECT_NO_THROW(check(m, 1, 3, 5)());
  m = {};
  m.alibi_slopes = DTensor1{0.5, 0.25};
  EXPECT_TRUE(throws_error_naming(check(m, 3, 3, 5), {fn, "mask.alibi_slopes", "length 2", "heads"}));
  m.alibi_slopes = DTensor1{0.5, -0.25};
  EXPECT_TRUE(throws_error_naming(check(m, 2, 3, 5), {fn, "mask.alibi_slopes", ">= 0"}));
  m.alibi_slopes = DTensor1{0.5, std::numeric_limits<double>::quiet_NaN()};
  EXPECT_TRUE(throws_error_naming(check(m, 2, 3, 5), {fn, "mask.alibi_slopes", "finite"}));
  m = {};
  m.window = SlidingWindow{-1, 2};
  EXPECT_TRUE(throws_error_naming(check(m, 1, 3, 5), {fn, "mask.window.left", "-1", ">= 0"}));
  m.window = SlidingWindow{1, -2};
  EXPECT_TRUE(throws_error_naming(check(m, 1, 3, 5), {fn, "mask.window.right", "-2", ">= 0"}));
  m = {};
  m.causal_align = static_cast<CausalAlign>(7);
  EXPECT_TRUE(throws_error_naming(check(m, 1, 3, 5), {fn, "mask.causal_align"}));
  // Bottom-right places the queries at the last seq_q key positions: with more queries than keys,
  // every part that uses positions is refused, naming the alignment and both lengths.
  for (int part = 0; part < 3; ++part) {
    AttentionMask p;
    if (part == 0) p.causal = true;
    if (part == 1) p.window = SlidingWindow{1, 1};
    if (part == 2) p.alibi_slopes = DTensor1{0.5};
    EXPECT_TRUE(throws_error_naming(check(p, 1, 6, 4), {fn, "mask.causal_align = bottom_right", "seq_q (6)", "seq_k (4)"}))
        << "part " << part;
    p.causal_align = CausalAlign::top_left;
    EXPECT_NO_THROW(check(p, 1, 6, 4)()) << "part " << part;
  }
  // A boolean mask or a bias needs no alignment, and rows that see no key are valid.
  m = {};
  m.allowed = Mask2(xt::zeros<bool>({6, 4}));
  EXPECT_NO_THROW(check(m, 1, 6, 4)());
  m = {};
  m.causal = true;
  m.causal_align = CausalAlign::top_left;
  m.window = SlidingWindow{0, 0};
  EXPECT_NO_THROW(check(m, 1, 6, 4)());  // rows 4 and 5 sit past the last key: fully masked
  EXPECT_TRUE(m.key_range(5, 6, 4).empty());
}

TEST(AttentionMask, require_supported_names_the_unsupported_part) {
  const char* fn = "flash_attention_forward";
  const MaskSupport causal_only{.causal = true};
  AttentionMask m;
  EXPECT_NO_THROW(require_supported(fn, m, MaskSupport{}));  // nothing asked, nothing needed
  m.causal = true;
  EXPECT_NO_THROW(require_supported(fn, m, causal_only));
  EXPECT_TRUE(throws_error_naming([&] { require_supported(fn, m, MaskSupport{}); }, {fn, "mask.causal", "not supported"}));
  m.window = SlidingWindow{4, 0};
  EXPECT_TRUE(throws_error_naming([&] { require_supported(fn, m, causal_only); },
                                  {fn, "mask.window", "not supported", "it supports: causal", "bottom_right"}));
  m.window.reset();
  m.causal_align = CausalAlign::top_left;
  EXPECT_TRUE(throws_error_naming([&] { require_supported(fn, m, causal_only); }, {fn, "mask.causal_align = top_left"}));
  EXPECT_NO_THROW(require_supported(fn, m, MaskSupport{.causal = true, .top_left = true}));
  // The alignment counts only where a part uses positions.
  AttentionMask explicit_only;
  explicit_only.causal_align = CausalAlign::top_left;
  explicit_only.bias = Tensor2(xt::zeros<float>({2, 2}));
  EXPECT_NO_THROW(require_supported(fn, explicit_only, MaskSupport{.bias = true}));
  EXPECT_TRUE(throws_error_naming([&] { require_supported(fn, explicit_only, causal_only); }, {fn, "mask.bias"}));
  AttentionMask boolean;
  boolean.allowed = Mask2(xt::ones<bool>({2, 2}));
  EXPECT_TRUE(throws_error_naming([&] { require_supported(fn, boolean, causal_only); }, {fn, "mask.allowed"}));
  AttentionMask alibi;
  alibi.alibi_slopes = DTensor1{0.5};
  EXPECT_TRUE(throws_error_naming([&] { require_supported(fn, alibi, causal_only); }, {fn, "mask.alibi_slopes"}));
  EXPECT_NO_THROW(require_supported(fn, alibi, MaskSupport{.alibi = true}));
  EXPECT_NO_THROW(require_supported(fn, alibi, kFullMaskSupport));
  EXPECT_EQ(to_string(MaskSupport{}), "no mask");
  EXPECT_EQ(to_string(kFullMaskSupport), "causal, causal_align = top_left, window, allowed, bias, alibi_slopes");
}

}  // namespace
}  // namespace tvlab
