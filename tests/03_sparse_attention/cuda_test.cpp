// Chapter 03's CUDA kernels beyond the registry's suites: layouts that walk every branch of the
// block-sparse kernel's loops (one layout per head with different tiles, a query block split over
// two thread blocks, key blocks staged in parts, empty query blocks and rows, mask bytes past the
// matrix's edge, head_dim 256), the log-sum-exp of both kernels, their tile counts, and their
// checks (the reference's, word for word). Every test is named cuda_* (ctest label ch03-gpu); those
// that run a kernel skip without a device.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../common/attention_oracle.hpp"
#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "tvlab/core/attention_patterns.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/cuda/runtime.hpp"
#include "tvlab/cuda/sparse_attention.hpp"
#include "tvlab/ref/sparse_attention.hpp"

namespace tvlab::sparse {
namespace {

using tvlab::testing::matches;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// What a kernel must produce, from chapter 00's double oracle with each head's mask: the outputs
// [heads, seq_q, head_dim_v], the log-sum-exp [heads, seq_q] (-inf for a row that sees no key),
// and the error bounds of float attention over these inputs.
struct Expected {
  DTensor3 out;
  DTensor2 lse;
  Tolerance out_tol, lse_tol;
};

// `mask_of_head(h)` is head h's boolean mask [seq_q, seq_k]. Tolerances: a score of magnitude M
// (the sum of |terms| in scale q . k) carries a float error of at most rtol M, which moves an
// output by at most 2 rtol M max|v|, and the weighted sum adds rtol max|v|
// (`attention_tolerance`); L = m + ln l moves with the scores (rtol M) and with the float sum
// l (rtol), rtol = reduction_rtol(max(head_dim, seq_k)).
Expected oracle(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                const std::function<Mask2(std::size_t)>& mask_of_head) {
  const std::size_t heads = q.shape()[0], seq_q = q.shape()[1], seq_k = k.shape()[1], d = q.shape()[2];
  Expected e{xt::zeros<double>({heads, seq_q, v.shape()[2]}), xt::zeros<double>({heads, seq_q}), {}, {}};
  double magnitude = 0.0;
  for (std::size_t h = 0; h < heads; ++h) {
    AttentionConfig cfg;
    cfg.mask.allowed = mask_of_head(h);
    const DTensor3 all_heads = tvlab::testing::sdpa_oracle(q, k, v, cfg);
    xt::view(e.out, h) = xt::view(all_heads, h);
    const DTensor2 s = tvlab::testing::masked_scores_oracle(q, k, cfg, h);
    for (std::size_t i = 0; i < seq_q; ++i) {
      // L_i = m + ln sum_j e^{s_ij - m}, m = max_j s_ij; -inf when every s_ij is -inf.
      double m = kNegInf, l = 0.0;
      for (std::size_t j = 0; j < seq_k; ++j) m = std::max(m, s(i, j));
      if (m == kNegInf) {
        e.lse(h, i) = kNegInf;
        continue;
      }
      for (std::size_t j = 0; j < seq_k; ++j) l += std::exp(s(i, j) - m);
      e.lse(h, i) = m + std::log(l);
    }
    magnitude = std::max(magnitude, tvlab::testing::score_magnitude(q, k, cfg));
  }
  const double rtol = reduction_rtol(std::max(d, seq_k));
  const double max_v = xt::amax(xt::abs(v))();
  e.out_tol = {attention_tolerance(d, seq_k, magnitude, max_v), rtol};
  e.lse_tol = {rtol * (magnitude + 1.0), rtol};
  return e;
}

// ------------------------------------------------------------------------------ block-sparse

struct LayoutCase {
  const char* label;
  std::size_t heads, seq_q, seq_k, head_dim, head_dim_v;
  HeadLayouts (*layouts)();
  const char* stresses;  // which part of the kernel the case reaches (printed on failure)
};
void PrintTo(const LayoutCase& c, std::ostream* out) { *out << c.label; }

// A random pattern: each (i, j) allowed with probability `density`.
SparsePattern random_pattern(std::size_t seq_q, std::size_t seq_k, double density, unsigned long long seed) {
  Rng rng(seed);
  Mask2 allowed = xt::zeros<bool>({seq_q, seq_k});
  for (std::size_t i = 0; i < seq_q; ++i)
    for (std::size_t j = 0; j < seq_k; ++j) allowed(i, j) = rng.uniform() < density;
  return pattern_from_mask(allowed);
}

// Rows 0 .. 39 see no key (query blocks 0 and 1 of 16 rows are empty, block 2 is half empty);
// row i >= 40 sees every 7th key back from itself, j <= i with (i - j) mod 7 = 0, except row 60,
// which sees none.
SparsePattern pattern_with_empty_rows(std::size_t n) {
  Mask2 allowed = xt::zeros<bool>({n, n});
  for (std::size_t i = 40; i < n; ++i)
    for (std::size_t j = 0; j <= i; ++j) allowed(i, j) = i != 60 && (i - j) % 7 == 0;
  return pattern_from_mask(allowed);
}

// A layout written by hand for 10 x 10 with tiles of 8 x 8: query block 0 (rows 0..7) lists key
// block 0 full and key block 1 partial, query block 1 (rows 8, 9) key block 1 partial. Both masks
// are all 1, also at the rows and keys past the matrix (10..15), which the kernel must ignore: the
// layout means rows 0..7 see every key, rows 8 and 9 see keys 8 and 9.
HeadLayouts layout_with_bytes_past_the_edge() {
  BlockLayout layout{.seq_q = 10, .seq_k = 10, .block_q = 8, .block_k = 8};
  layout.block_start = {0, 2, 3};
  layout.key_blocks = {0, 1, 1};
  layout.partial = {-1, 0, 1};
  layout.masks.assign(2 * 8 * 8, 1);
  return {layout};
}

const LayoutCase kLayoutCases[] = {
    {"one layout per head with different tiles, n 100", 2, 100, 100, 16, 16,
     [] {
       return HeadLayouts{to_block_layout(sliding_window_pattern(100, 5, 5), 16, 8),
                          to_block_layout(strided_pattern(100, 10, 2), 32, 64)};
     },
     "each head reads its own layout's tiles; 100 is a multiple of neither 16 nor 32 nor 64"},
    {"a query block of 1500 rows, causal window of 41", 1, 1500, 1500, 8, 8,
     [] { return HeadLayouts{to_block_layout(sliding_window_pattern(1500, 40, 0), 2048, 64)}; },
     "one query block of 1500 rows is split over two thread blocks of at most 1024 threads"},
    {"key blocks of 300 keys, random partial blocks, 200 queries over 700 keys", 2, 200, 700, 32, 24,
     [] { return HeadLayouts{to_block_layout(random_pattern(200, 700, 0.3, 71), 64, 300)}; },
     "a key block wider than the staged tile is staged in parts (128, 128, 44), the last key block has 100 keys"},
    {"empty query blocks and rows that see no key, n 90", 1, 90, 90, 8, 8,
     [] { return HeadLayouts{to_block_layout(pattern_with_empty_rows(90), 16, 16)}; },
     "a query block with no key block and rows with no key: output 0 and log-sum-exp -inf"},
    {"Longformer with globals 0 and 50, head_dim 256, head_dim_v 40, n 77", 1, 77, 77, 256, 40,
     [] { return HeadLayouts{to_block_layout(longformer_pattern(77, 4, {0, 50}, false), 32, 32)}; },
     "the largest head_dim, a different head_dim_v, full and partial blocks"},
    {"a written layout whose masks hold 1 past the matrix's edge", 2, 10, 10, 8, 8, layout_with_bytes_past_the_edge,
     "mask bytes of rows 10..15 and keys 10..15 lie outside the matrix and must be ignored"},
};

class CudaBlockSparse : public ::testing::TestWithParam<LayoutCase> {};

// o_i = sum over the layout's allowed keys of softmax(s_ij) v_j (the layout's meaning is
// `to_pattern`), with L_i = ln sum_j e^{s_ij}; tiles_computed = the listed blocks of every head.
TEST_P(CudaBlockSparse, cuda_block_sparse_kernel_matches_the_oracle) {
  TVLAB_SKIP_WITHOUT_CUDA_DEVICE();
  const LayoutCase& c = GetParam();
  const unsigned long long seed = 3000 + c.seq_q + c.seq_k;
  Rng rng(seed);
  const Tensor3 q = rng.normal_tensor(c.heads, c.seq_q, c.head_dim);
  const Tensor3 k = rng.normal_tensor(c.heads, c.seq_k, c.head_dim);
  const Tensor3 v = rng.normal_tensor(c.heads, c.seq_k, c.head_dim_v);
  const HeadLayouts layouts = c.layouts();
  const Expected e = oracle(q, k, v, [&](std::size_t h) { return to_pattern(layout_of_head(layouts, h)).to_mask(); });
  const FlashOutput got = cuda::block_sparse_attention(q, k, v, layouts, {});
  const std::string what = std::string("cuda block_sparse_attention, ") + c.label;
  const std::string explore = std::string("tvlab ") + TVLAB_CHAPTER_NAME + " --step --backend cuda";
  EXPECT_TRUE(matches(got.out, e.out, e.out_tol,
                      {what, {"h", "i", "c"}, seed, explore,
                       std::string("$o_i = \\sum_{j \\in S_i} \\mathrm{softmax}_j(s_{ij})\\, v_j$; this case: ") +
                           c.stresses}));
  EXPECT_TRUE(matches(got.lse, e.lse, e.lse_tol,
                      {"log-sum-exp, " + what, {"h", "i"}, seed, explore,
                       "$L_i = m_i + \\ln \\ell_i$, $-\\infty$ for a row that sees no key; this case: " +
                           std::string(c.stresses)}));
  std::size_t listed = 0;
  for (std::size_t h = 0; h < c.heads; ++h) listed += layout_of_head(layouts, h).blocks();
  EXPECT_EQ(got.tiles_computed, listed)
      << c.label << ": every listed (query block, key block) pair of every head is visited once";
  EXPECT_EQ(got.tiles_skipped, 0U) << c.label << ": as the reference, the block-sparse kernel reports no skipped tiles";
}

INSTANTIATE_TEST_SUITE_P(Ch03, CudaBlockSparse, ::testing::ValuesIn(kLayoutCases),
                         [](const auto& info) { return tvlab::testing::identifier(info.param.label); });

// ------------------------------------------------------------------------------ sliding window

struct WindowCase {
  const char* label;
  std::size_t heads, seq_q, seq_k, head_dim;
  long long left, right;
  // Tiles of 64 queries x 64 keys, summed over heads, worked out by hand below; -1: not checked
  // (head_dim 256: a device with less shared memory than 128 KiB per block stages fewer keys).
  long long computed, skipped;
};
void PrintTo(const WindowCase& c, std::ostream* out) { *out << c.label; }

const WindowCase kWindowCases[] = {
    // Query tile t (rows 64t .. 64t + 63) sees keys 64t - 63 .. 64t + 63: key tile 0 for t = 0, key
    // tiles t - 1 and t after: 1 + 2 + 2 + 2 = 7 of 16 per head.
    {"n 256, causal window of 64, 2 heads", 2, 256, 256, 16, 63, 0, 2 * 7, 2 * 9},
    // One query at i' = 299 sees keys 199 .. 299: key tiles 3 (192..255) and 4 (256..299) of 5.
    {"decode: 1 query over 300 keys, causal window of 101", 1, 1, 300, 32, 100, 0, 2, 3},
    // Query tile t sees keys 64t - 70 .. 64t + 133 within 0..299, key tiles: t = 0: 0..2 (keys
    // 0..133), t = 1: 0..3 (0..197), t = 2: 0..4 (58..261), t = 3: 1..4 (122..299), t = 4 (rows
    // 256..299): 2..4 (186..299); 3 + 4 + 5 + 4 + 3 = 19 of 25.
    {"n 300, radius 70", 1, 300, 300, 8, 70, 70, 19, 6},
    {"n 700, head_dim 256, window wider than the sequence", 1, 700, 700, 256, 1000, 1000, -1, -1},
};

class CudaSlidingWindow : public ::testing::TestWithParam<WindowCase> {};

// o_i over the keys i' - w_l <= j <= i' + w_r (i' = i + n_k - n_q), its log-sum-exp, and the key
// tiles visited: those that meet the query tile's rows' windows.
TEST_P(CudaSlidingWindow, cuda_sliding_window_kernel_matches_the_oracle_and_visits_the_windows_tiles) {
  TVLAB_SKIP_WITHOUT_CUDA_DEVICE();
  const WindowCase& c = GetParam();
  const unsigned long long seed = 3100 + c.seq_q + c.seq_k;
  Rng rng(seed);
  const Tensor3 q = rng.normal_tensor(c.heads, c.seq_q, c.head_dim);
  const Tensor3 k = rng.normal_tensor(c.heads, c.seq_k, c.head_dim);
  const Tensor3 v = rng.normal_tensor(c.heads, c.seq_k, c.head_dim);
  // The window's mask from its definition, written out here.
  Mask2 allowed = xt::zeros<bool>({c.seq_q, c.seq_k});
  for (std::size_t i = 0; i < c.seq_q; ++i)
    for (std::size_t j = 0; j < c.seq_k; ++j) {
      const long long position = static_cast<long long>(i + c.seq_k - c.seq_q), key = static_cast<long long>(j);
      allowed(i, j) = position - c.left <= key && key <= position + c.right;
    }
  const Expected e = oracle(q, k, v, [&](std::size_t) { return allowed; });
  const FlashOutput got = cuda::sliding_window_attention(q, k, v, SlidingWindow{c.left, c.right}, {});
  const std::string what = std::string("cuda sliding_window_attention, ") + c.label;
  const std::string explore = std::string("tvlab ") + TVLAB_CHAPTER_NAME + " --step --backend cuda";
  const std::string hint = "$S_i = [i' - w_l, i' + w_r] \\cap [0, n_k)$, $i' = i + n_k - n_q$";
  EXPECT_TRUE(matches(got.out, e.out, e.out_tol, {what, {"h", "i", "c"}, seed, explore, hint}));
  EXPECT_TRUE(matches(got.lse, e.lse, e.lse_tol, {"log-sum-exp, " + what, {"h", "i"}, seed, explore, hint}));
  if (c.computed >= 0) {
    EXPECT_EQ(got.tiles_computed, static_cast<std::size_t>(c.computed))
        << c.label << ": a key tile is visited when it holds a key of some row's window";
    EXPECT_EQ(got.tiles_skipped, static_cast<std::size_t>(c.skipped))
        << c.label << ": every other key tile of the 64-key grid is skipped";
  }
}

INSTANTIATE_TEST_SUITE_P(Ch03, CudaSlidingWindow, ::testing::ValuesIn(kWindowCases),
                         [](const auto& info) { return tvlab::testing::identifier(info.param.label); });

// ------------------------------------------------------------------------------ bad input

// Passes when both calls throw tvlab::Error with the same message (the checks run on the host,
// before any device call, so this test runs everywhere).
template <class F, class G>
::testing::AssertionResult same_error(F&& cuda_call, G&& ref_call) {
  std::string messages[2];
  const std::function<void()> calls[2] = {cuda_call, ref_call};
  for (int t = 0; t < 2; ++t) {
    try {
      calls[t]();
      return ::testing::AssertionFailure() << (t == 0 ? "cuda" : "ref") << " threw nothing";
    } catch (const Error& e) {
      messages[t] = e.what();
    } catch (const std::exception& e) {
      return ::testing::AssertionFailure() << (t == 0 ? "cuda" : "ref") << " threw another exception: " << e.what();
    }
  }
  if (messages[0] == messages[1]) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "cuda says \"" << messages[0] << "\"\nref says  \"" << messages[1] << "\"";
}

TEST(Ch03CudaChecks, cuda_kernels_reject_bad_input_with_the_references_words) {
  const Tensor3 x = xt::ones<float>({2, 10, 8});
  const HeadLayouts good = {to_block_layout(sliding_window_pattern(10, 2, 2), 4, 4)};
  const auto block_sparse_same = [&](const Tensor3& q, const Tensor3& kv, const HeadLayouts& layouts) {
    return same_error([&] { cuda::block_sparse_attention(q, kv, kv, layouts, {}); },
                      [&] { ref::block_sparse_attention(q, kv, kv, layouts, {}); });
  };
  EXPECT_TRUE(block_sparse_same(x, x, {good[0], good[0], good[0]})) << "3 layouts for 2 heads";
  EXPECT_TRUE(block_sparse_same(x, x, {to_block_layout(sliding_window_pattern(8, 2, 2), 4, 4)}))
      << "an 8 x 8 layout for 10 x 10";
  HeadLayouts bad = good;
  bad[0].block_q = 0;
  EXPECT_TRUE(block_sparse_same(x, x, bad)) << "block_q 0";
  bad = good;
  bad[0].key_blocks.back() = 3;
  EXPECT_TRUE(block_sparse_same(x, x, bad)) << "a key block beyond the 3 of 10 keys";
  bad = good;
  bad[0].partial.back() = static_cast<std::int32_t>(good[0].partial_blocks());
  EXPECT_TRUE(block_sparse_same(x, x, bad)) << "a mask index beyond the masks";
  const Tensor3 wide = xt::ones<float>({2, 10, 264});
  EXPECT_TRUE(block_sparse_same(wide, wide, good)) << "head_dim 264";
  Tensor3 nan = x;
  nan(1, 3, 2) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(block_sparse_same(nan, x, good)) << "q with a NaN";

  const auto window_same = [&](const Tensor3& q, const Tensor3& kv, SlidingWindow w) {
    return same_error([&] { cuda::sliding_window_attention(q, kv, kv, w, {}); },
                      [&] { ref::sliding_window_attention(q, kv, kv, w, {}); });
  };
  EXPECT_TRUE(window_same(x, x, {-1, 0})) << "window.left -1";
  EXPECT_TRUE(window_same(x, x, {0, -1})) << "window.right -1";
  EXPECT_TRUE(window_same(xt::ones<float>({2, 12, 8}), x, {2, 0})) << "12 queries over 10 keys";
  EXPECT_TRUE(window_same(xt::ones<float>({3, 10, 8}), x, {2, 0})) << "q of 3 heads, k of 2";
}

}  // namespace
}  // namespace tvlab::sparse
