// Chapter 04: the online softmax's state algebra (update and merge) and the IO model of standard
// and tiled attention, checked on the reference.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "../00_attention_basics/oracle.hpp"
#include "../common/testing.hpp"
#include "tvlab/analysis/io_model.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/online_softmax.hpp"

namespace tvlab::ch04 {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// m and l of a whole row in one pass, in double: the definition.
ref::SoftmaxState direct(const std::vector<float>& x) {
  double m = -std::numeric_limits<double>::infinity(), l = 0;
  for (float v : x) m = std::max(m, static_cast<double>(v));
  if (m == -std::numeric_limits<double>::infinity()) return {};
  for (float v : x) l += std::exp(static_cast<double>(v) - m);
  return {m, l};
}

TEST(Ch04OnlineSoftmax, merging_the_states_of_any_split_gives_the_state_of_the_whole) {
  Rng rng(4);
  std::vector<float> x(50);
  for (auto& v : x) v = static_cast<float>(rng.normal() * 4);
  x[31] = 25.0f;  // the maximum sits in the right part for most splits
  x[7] = kNegInf;
  const ref::SoftmaxState whole = direct(x);
  for (std::size_t split = 0; split <= x.size(); ++split) {
    const std::span<const float> left(x.data(), split), right(x.data() + split, x.size() - split);
    const ref::SoftmaxState a = ref::online_softmax_update({}, left), b = ref::online_softmax_update({}, right);
    for (const ref::SoftmaxState merged : {ref::online_softmax_merge(a, b), ref::online_softmax_merge(b, a)}) {
      EXPECT_EQ(merged.max, whole.max) << "split " << split;
      EXPECT_NEAR(merged.sum, whole.sum, 1e-14 * whole.sum) << "split " << split;
    }
    // Streaming the right part into the left part's state is the same as merging.
    const ref::SoftmaxState streamed = ref::online_softmax_update(a, right);
    EXPECT_EQ(streamed.max, whole.max);
    EXPECT_NEAR(streamed.sum, whole.sum, 1e-14 * whole.sum) << "split " << split;
  }
}

TEST(Ch04OnlineSoftmax, the_empty_state_and_masked_blocks_change_nothing) {
  const std::vector<float> x = {0.5f, -1.0f, 3.0f};
  const ref::SoftmaxState s = ref::online_softmax_update({}, x);
  const ref::SoftmaxState with_empty = ref::online_softmax_merge(s, {});
  EXPECT_EQ(with_empty.max, s.max);
  EXPECT_EQ(with_empty.sum, s.sum);
  const std::vector<float> masked = {kNegInf, kNegInf};
  const ref::SoftmaxState after_masked = ref::online_softmax_update(s, masked);
  EXPECT_EQ(after_masked.max, s.max);
  EXPECT_EQ(after_masked.sum, s.sum);
  // Only masked logits so far: still the empty state, no NaN from (-inf) - (-inf).
  const ref::SoftmaxState nothing = ref::online_softmax_update({}, masked);
  EXPECT_EQ(nothing.sum, 0.0);
  const ref::SoftmaxState later = ref::online_softmax_update(nothing, x);
  EXPECT_EQ(later.max, s.max);
  EXPECT_NEAR(later.sum, s.sum, 1e-15);
  const std::vector<float> bad = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_TRUE(tvlab::testing::throws_error_naming([&] { ref::online_softmax_update({}, bad); },
                                                  {"online_softmax_update", "block"}));
}

}  // namespace
}  // namespace tvlab::ch04

// ------------------------------------------------------------------------------------ IO model

namespace tvlab::ch04 {
namespace {

// [n, d] -> [1, n, d]
Tensor3 as_head(const Tensor2& x) {
  Tensor3 t = Tensor3::from_shape({1, x.shape()[0], x.shape()[1]});
  std::copy(x.begin(), x.end(), t.begin());
  return t;
}

TEST(Ch04IoModel, instrumented_runs_compute_attention_and_match_the_closed_form_counts) {
  for (const auto& [n, d, sram] : {std::tuple<std::size_t, std::size_t, std::size_t>{64, 16, 1024},
                                   {100, 8, 300}, {37, 32, 128}, {200, 16, 64 * 16}}) {
    Rng rng(n + d);
    const Tensor2 q = rng.normal_matrix(n, d), k = rng.normal_matrix(n, d), v = rng.normal_matrix(n, d);
    const DTensor3 expected = ch00::sdpa_oracle(as_head(q), as_head(k), as_head(v), {});
    const analysis::IoRun standard = analysis::standard_attention_io_run(q, k, v);
    const analysis::IoRun flash = analysis::flash_attention_io_run(q, k, v, sram);
    const std::string shape = "n " + std::to_string(n) + ", d " + std::to_string(d) + ", M " + std::to_string(sram);
    // Both runs compute in double and round once to float.
    EXPECT_TRUE(tvlab::testing::matches(as_head(standard.out), expected, {1e-6, 1e-6}, {"standard run, " + shape, {"h", "i", "d"}, n + d, "", ""}));
    EXPECT_TRUE(tvlab::testing::matches(as_head(flash.out), expected, {1e-6, 1e-6}, {"flash run, " + shape, {"h", "i", "d"}, n + d, "", ""}));
    const analysis::IoCount s = analysis::standard_attention_io(n, d), f = analysis::flash_attention_io(n, d, sram);
    EXPECT_EQ(standard.io.hbm_reads, s.hbm_reads) << shape;
    EXPECT_EQ(standard.io.hbm_writes, s.hbm_writes) << shape;
    EXPECT_EQ(standard.io.peak_sram, s.peak_sram) << shape;
    EXPECT_EQ(flash.io.hbm_reads, f.hbm_reads) << shape;
    EXPECT_EQ(flash.io.hbm_writes, f.hbm_writes) << shape;
    EXPECT_EQ(flash.io.peak_sram, f.peak_sram) << shape;
    // Standard attention moves 4 n^2 + 4 n d elements.
    const double N = static_cast<double>(n), D = static_cast<double>(d);
    EXPECT_EQ(standard.io.total(), 4 * N * N + 4 * N * D) << shape;
    // B_c = ceil(M / 4d), B_r = min(B_c, d).
    EXPECT_EQ(flash.block_c, (sram + 4 * d - 1) / (4 * d));
    EXPECT_EQ(flash.block_r, std::min(flash.block_c, d));
  }
}

TEST(Ch04IoModel, flash_traffic_falls_as_one_over_m_and_beats_standard_by_about_m_over_3d2) {
  // Theta(n^2 d^2 / M): per key tile (n / B_c of them, B_c = M / 4d) the whole of Q and O moves,
  // about 3 n d elements: 12 n^2 d^2 / M in all, against 4 n^2 for standard attention.
  const std::size_t n = 1 << 16, d = 64;
  for (std::size_t sram : {std::size_t{1} << 14, std::size_t{1} << 15, std::size_t{1} << 16}) {
    const double flash = analysis::flash_attention_io(n, d, sram).total();
    const double twice = analysis::flash_attention_io(n, d, 2 * sram).total();
    EXPECT_NEAR(flash / twice, 2.0, 0.05) << "M = " << sram;
    const double ratio = analysis::standard_attention_io(n, d).total() / flash;
    const double predicted = static_cast<double>(sram) / (3.0 * d * d);
    EXPECT_NEAR(ratio, predicted, 0.05 * predicted) << "M = " << sram;
  }
}

TEST(Ch04IoModel, rejects_memory_too_small_for_a_tile_and_mismatched_inputs) {
  const Tensor2 x = xt::ones<float>({8, 16});
  EXPECT_TRUE(tvlab::testing::throws_error_naming([&] { analysis::flash_attention_io_run(x, x, x, 63); },
                                                  {"flash_attention_io_run", "sram_floats"}));
  EXPECT_TRUE(tvlab::testing::throws_error_naming([&] { analysis::flash_attention_io(8, 16, 10); }, {"sram_floats"}));
  const Tensor2 other = xt::ones<float>({7, 16});
  EXPECT_TRUE(tvlab::testing::throws_error_naming([&] { analysis::standard_attention_io_run(x, other, x); }, {"k", "rows"}));
}

}  // namespace
}  // namespace tvlab::ch04
