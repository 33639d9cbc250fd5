// Chapter 04: the online softmax's state algebra (update and merge) and the IO model of standard
// and tiled attention, checked on the reference.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "../common/attention_oracle.hpp"
#include "../common/testing.hpp"
#include "tvlab/analysis/io_model.hpp"
#include "tvlab/core/dtype.hpp"
#include "tvlab/opt/flash_attention.hpp"
#include "tvlab/ref/flash_attention.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/online_softmax.hpp"

namespace tvlab::ch04 {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

TEST(Ch04OnlineSoftmax, streaming_any_split_equals_one_update_of_the_whole_row) {
  // (The merge of two states is tested over every implementation in suite_test.cpp.)
  Rng rng(4);
  std::vector<float> x(50);
  for (auto& v : x) v = static_cast<float>(rng.normal() * 4);
  x[31] = 25.0f;  // the maximum arrives late for most splits
  x[7] = kNegInf;
  const ref::SoftmaxState whole = ref::online_softmax_update({}, x);
  for (std::size_t split = 0; split <= x.size(); ++split) {
    const std::span<const float> left(x.data(), split), right(x.data() + split, x.size() - split);
    const ref::SoftmaxState streamed = ref::online_softmax_update(ref::online_softmax_update({}, left), right);
    EXPECT_EQ(streamed.max, whole.max) << "split " << split;
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
    const DTensor3 expected = testing::sdpa_oracle(as_head(q), as_head(k), as_head(v), {});
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

// ------------------------------------------------------------------------- FP8 (E4M3) emulation

namespace tvlab::ch04 {
namespace {

// Naive attention in FP8, in double: the same rounding of Q, K, V (per tensor) and of the
// weights, but the whole n x n matrix at once — the "naive implementation in the same precision"
// of FlashAttention's accuracy rule.
DTensor3 naive_fp8_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v) {
  auto through = [](const Tensor3& x) {
    const float amax = xt::amax(xt::abs(x))();
    Tensor3 y = x;
    for (auto& value : y) value = round_to_e4m3(value * (kE4m3Max / amax)) / (kE4m3Max / amax);
    return y;
  };
  const Tensor3 q8 = through(q), k8 = through(k), v8 = through(v);
  const std::size_t heads = q.shape()[0], n = q.shape()[1], d = q.shape()[2];
  DTensor3 out = xt::zeros<double>({heads, n, d});
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < n; ++i) {
      std::vector<double> s(n);
      double m = -std::numeric_limits<double>::infinity(), l = 0;
      for (std::size_t j = 0; j < n; ++j) {
        double dot = 0;
        for (std::size_t c = 0; c < d; ++c) dot += static_cast<double>(q8(h, i, c)) * k8(h, j, c);
        s[j] = dot / std::sqrt(static_cast<double>(d));
        m = std::max(m, s[j]);
      }
      for (double& x : s) l += (x = std::exp(x - m));
      for (std::size_t j = 0; j < n; ++j) {
        const double p = round_to_e4m3(static_cast<float>(s[j]));
        for (std::size_t c = 0; c < d; ++c) out(h, i, c) += p * v8(h, j, c) / l;
      }
    }
  return out;
}

double max_abs_error(const Tensor3& a, const DTensor3& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a.data()[i] - b.data()[i]));
  return worst;
}

TEST(Ch04Fp8, per_tensor_fp8_stays_within_twice_the_naive_fp8_error) {
  Rng rng(21);
  const Tensor3 q = rng.normal_tensor(2, 96, 64), k = rng.normal_tensor(2, 96, 64), v = rng.normal_tensor(2, 96, 64);
  const DTensor3 exact = testing::sdpa_oracle(q, k, v, {});
  FlashConfig cfg;
  cfg.block_q = cfg.block_k = 32;
  cfg.fp8 = Fp8Scaling::per_tensor;
  const double flash_error = max_abs_error(ref::flash_attention_forward(q, k, v, cfg).out, exact);
  Tensor3 naive = Tensor3::from_shape(q.shape());
  const DTensor3 naive_d = naive_fp8_attention(q, k, v);
  std::copy(naive_d.begin(), naive_d.end(), naive.begin());
  const double naive_error = max_abs_error(naive, exact);
  // FlashAttention's rule for low precision: at most 2x the naive error (plus a small floor).
  EXPECT_LE(flash_error, 2 * naive_error + 1e-6) << "flash fp8 " << flash_error << ", naive fp8 " << naive_error;
  EXPECT_GT(flash_error, 1e-3) << "E4M3 keeps 3 mantissa bits: the error cannot be float-sized";
}

TEST(Ch04Fp8, per_block_scaling_recovers_what_an_outlier_costs_per_tensor_scaling) {
  // E4M3 is floating point: one scale per tensor costs nothing until the tensor's dynamic range
  // exceeds the format's (448 down to the smallest normal 2^-6, then subnormals). One query row
  // 1e5 times larger (an outlier token) pushes every other query into the subnormals under a
  // per-tensor scale; one scale per block of 16 rows confines the damage to the outlier's block.
  Rng rng(22);
  Tensor3 q = rng.normal_tensor(1, 64, 64);
  const Tensor3 k = rng.normal_tensor(1, 64, 64), v = rng.normal_tensor(1, 64, 64);
  for (std::size_t c = 0; c < 64; ++c) q(0, 5, c) *= 1e5f;
  const DTensor3 exact = testing::sdpa_oracle(q, k, v, {});
  // RMS error over the rows outside the outlier's block (rows 16 .. 63).
  auto rms_outside = [&](const Tensor3& out) {
    double sum = 0;
    for (std::size_t i = 16; i < 64; ++i)
      for (std::size_t c = 0; c < 64; ++c) sum += std::pow(out(0, i, c) - exact(0, i, c), 2);
    return std::sqrt(sum / (48 * 64));
  };
  FlashConfig cfg;
  cfg.block_q = cfg.block_k = 16;
  cfg.fp8 = Fp8Scaling::per_tensor;
  const double per_tensor = rms_outside(ref::flash_attention_forward(q, k, v, cfg).out);
  cfg.fp8 = Fp8Scaling::per_block;
  const double per_block = rms_outside(ref::flash_attention_forward(q, k, v, cfg).out);
  EXPECT_LT(per_block, 0.5 * per_tensor) << "per tensor " << per_tensor << ", per block " << per_block;
  RecordProperty("rms_error_per_tensor", std::to_string(per_tensor));
  RecordProperty("rms_error_per_block", std::to_string(per_block));
  // Per block, those rows do not notice the outlier at all: their scales are their own.
  Tensor3 q_without = q;
  for (std::size_t c = 0; c < 64; ++c) q_without(0, 5, c) /= 1e5f;
  EXPECT_NEAR(per_block, rms_outside(ref::flash_attention_forward(q_without, k, v, cfg).out), 1e-12);
  // The optimized versions do not emulate FP8 and say so.
  EXPECT_TRUE(tvlab::testing::throws_error_naming([&] { opt::flash_attention_forward(q, k, v, cfg); }, {"cfg.fp8"}));
}

}  // namespace
}  // namespace tvlab::ch04
