// Chapter 02 suites over every RoPE implementation: equivalence with a complex-number oracle,
// the two layouts as one rotation, the relative-position property, bad input.

#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstdlib>
#include <tuple>
#include <limits>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "impls.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/rope.hpp"

namespace tvlab::ch02 {
namespace {

using tvlab::testing::matches;
using tvlab::testing::throws_error_naming;

class Rope : public ::testing::TestWithParam<Impl> {};

// Oracle: a pair (x_a, x_b) is the complex number x_a + i x_b; RoPE multiplies it by
// e^{i m theta} (times the attention factor). Computed in double with std::polar.
DTensor3 rope_oracle(const Tensor3& x, const RopeFrequencies& f, RopeLayout layout, long long offset) {
  const std::size_t heads = x.shape()[0], seq = x.shape()[1], d = x.shape()[2], pairs = d / 2;
  DTensor3 y = DTensor3::from_shape({heads, seq, d});
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t t = 0; t < seq; ++t)
      for (std::size_t i = 0; i < pairs; ++i) {
        const std::size_t a = layout == RopeLayout::interleaved ? 2 * i : i;
        const std::size_t b = layout == RopeLayout::interleaved ? 2 * i + 1 : i + pairs;
        const std::complex<double> z(x(h, t, a), x(h, t, b));
        const double angle = static_cast<double>(offset + static_cast<long long>(t)) * f.inv_freq(i);
        const std::complex<double> r = z * std::polar(f.attention_factor, angle);
        y(h, t, a) = r.real();
        y(h, t, b) = r.imag();
      }
  return y;
}

RopeFrequencies freqs_for(int head_dim, double theta) {
  RopeConfig cfg;
  cfg.head_dim = head_dim;
  cfg.rope_theta = theta;
  return ref::rope_frequencies(cfg);
}

TEST_P(Rope, matches_the_complex_rotation_oracle) {
  const Impl& impl = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  struct Case {
    int heads, seq, head_dim;
    long long offset;
    double theta;
  };
  for (const Case c : {Case{1, 1, 2, 0, 10000}, Case{2, 7, 6, 3, 10000}, Case{3, 33, 64, 0, 10000},
                       Case{2, 5, 128, 100000, 500000}}) {
    Rng rng(static_cast<std::uint64_t>(c.seq * 100 + c.head_dim));
    const Tensor3 x = rng.normal_tensor(static_cast<std::size_t>(c.heads), static_cast<std::size_t>(c.seq),
                                        static_cast<std::size_t>(c.head_dim));
    RopeFrequencies f = freqs_for(c.head_dim, c.theta);
    f.attention_factor = 1.25;
    for (RopeLayout layout : {RopeLayout::interleaved, RopeLayout::half_split}) {
      // Elementwise: x_a cos - x_b sin with the angle in double, one rounding to float: a few ulp
      // of |x|. Positions near 1e5 put the angle at ~1e5 rad, where a float angle would be off by
      // ~0.01; cos/sin must be formed from a double angle.
      EXPECT_TRUE(matches(impl.apply_rope(x, f, layout, c.offset), rope_oracle(x, f, layout, c.offset), {2e-6, 4e-7},
                          {"apply_rope, head_dim " + std::to_string(c.head_dim) + ", offset " + std::to_string(c.offset) +
                               (layout == RopeLayout::interleaved ? ", interleaved" : ", half_split"),
                           {"h", "t", "d"}, 0, "",
                           "interleaved pairs are (2i, 2i+1); half_split pairs are (i, i + d/2)"}));
    }
  }
}

TEST_P(Rope, the_two_layouts_are_one_rotation_up_to_a_permutation) {
  const Impl& impl = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  Rng rng(5);
  const Tensor3 x = rng.normal_tensor(2, 9, 16);
  const RopeFrequencies f = freqs_for(16, 10000);
  // P maps interleaved coordinates to half_split ones: 2i -> i, 2i+1 -> i + d/2.
  auto permute = [](const Tensor3& t) {
    Tensor3 p = t;
    for (std::size_t h = 0; h < t.shape()[0]; ++h)
      for (std::size_t s = 0; s < t.shape()[1]; ++s)
        for (std::size_t i = 0; i < 8; ++i) {
          p(h, s, i) = t(h, s, 2 * i);
          p(h, s, i + 8) = t(h, s, 2 * i + 1);
        }
    return p;
  };
  const Tensor3 a = permute(impl.apply_rope(x, f, RopeLayout::interleaved, 4));
  const Tensor3 b = impl.apply_rope(permute(x), f, RopeLayout::half_split, 4);
  EXPECT_TRUE(matches(a, xt::eval(xt::cast<double>(b)), {1e-6, 1e-6},
                      {"P(rope_interleaved(x)) vs rope_half_split(P x)", {"h", "t", "d"}, 5, "", ""}));
}

TEST_P(Rope, scores_depend_only_on_the_relative_position) {
  const Impl& impl = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  // (R_m q) . (R_n k) = q . (R_{n-m} k): compare every (m, n) with the same n - m.
  Rng rng(6);
  const Tensor3 q = rng.normal_tensor(1, 1, 32), k = rng.normal_tensor(1, 1, 32);
  const RopeFrequencies f = freqs_for(32, 10000);
  for (RopeLayout layout : {RopeLayout::interleaved, RopeLayout::half_split}) {
    for (long long m : {0LL, 1LL, 17LL, 1000LL}) {
      for (long long delta : {0LL, 3LL, 250LL}) {
        const Tensor3 qm = impl.apply_rope(q, f, layout, m), kn = impl.apply_rope(k, f, layout, m + delta);
        const Tensor3 k_delta = impl.apply_rope(k, f, layout, delta);
        double lhs = 0, rhs = 0, scale = 0;
        for (std::size_t i = 0; i < 32; ++i) {
          lhs += static_cast<double>(qm(0, 0, i)) * kn(0, 0, i);
          rhs += static_cast<double>(q(0, 0, i)) * k_delta(0, 0, i);
          scale += std::fabs(q(0, 0, i) * k(0, 0, i));
        }
        // Both sides are float rotations summed over 32 terms: ~10 eps sqrt(32) relative to sum |q k|.
        EXPECT_NEAR(lhs, rhs, 10 * 1.2e-7 * std::sqrt(32.0) * scale * 4) << "m = " << m << ", n - m = " << delta;
      }
    }
  }
}

TEST_P(Rope, rejects_bad_input_naming_the_parameter) {
  const Impl& impl = GetParam();
  const RopeFrequencies f = freqs_for(8, 10000);
  EXPECT_TRUE(throws_error_naming([&] { impl.apply_rope(Tensor3(xt::ones<float>({1, 2, 7})), f, RopeLayout::half_split, 0); },
                                  {"apply_rope", "head_dim", "even"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.apply_rope(Tensor3(xt::ones<float>({1, 2, 6})), f, RopeLayout::half_split, 0); },
                                  {"apply_rope", "inv_freq"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.apply_rope(Tensor3(xt::ones<float>({1, 2, 8})), f, RopeLayout::half_split, -1); },
                                  {"apply_rope", "position_offset"}));
  Tensor3 bad = xt::ones<float>({1, 2, 8});
  bad(0, 1, 3) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { impl.apply_rope(bad, f, RopeLayout::interleaved, 0); }, {"apply_rope", "x"}));
}

INSTANTIATE_TEST_SUITE_P(Ch02, Rope, ::testing::ValuesIn(tvlab::testing::providing(registry(), &Impl::apply_rope)),
                         tvlab::testing::ImplName());

// ------------------------------------------------------------------------------------------ ALiBi

class Alibi : public ::testing::TestWithParam<Impl> {};

TEST_P(Alibi, bias_is_minus_slope_times_distance) {
  const Impl& impl = GetParam();
  for (const auto mode : {ref::AlibiMode::causal, ref::AlibiMode::symmetric})
    for (const auto& [heads, nq, nk] : {std::tuple{8, 5, 5}, std::tuple{12, 3, 40}, std::tuple{3, 17, 17}}) {
      const Tensor3 b = impl.alibi_bias(heads, nq, nk, mode);
      const DTensor1 m = ref::alibi_slopes(heads);
      DTensor3 expected = DTensor3::from_shape({static_cast<std::size_t>(heads), static_cast<std::size_t>(nq),
                                                static_cast<std::size_t>(nk)});
      for (int h = 0; h < heads; ++h)
        for (long long i = 0; i < nq; ++i)
          for (long long j = 0; j < nk; ++j) {
            const long long distance = i + (nk - nq) - j;  // queries aligned to the last keys
            expected(h, i, j) = mode == ref::AlibiMode::causal && distance < 0
                                    ? -std::numeric_limits<double>::infinity()
                                    : -m(h) * static_cast<double>(std::llabs(distance));
          }
      // One float rounding of slope x distance: 2 eps relative (-inf must match exactly).
      EXPECT_TRUE(matches(b, expected, {0.0, 2.4e-7},
                          {std::string("alibi_bias ") + (mode == ref::AlibiMode::causal ? "causal" : "symmetric") + ", " +
                               std::to_string(heads) + " heads, " + std::to_string(nq) + " x " + std::to_string(nk),
                           {"h", "i", "j"}, 0, "", "the bias is -m_h (i - j), keys later than the query are -inf when causal"}));
    }
}

TEST_P(Alibi, rejects_bad_input_naming_the_parameter) {
  const Impl& impl = GetParam();
  EXPECT_TRUE(throws_error_naming([&] { impl.alibi_bias(0, 4, 4, ref::AlibiMode::causal); }, {"alibi_bias", "num_heads"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.alibi_bias(4, 0, 4, ref::AlibiMode::causal); }, {"alibi_bias", "seq_q"}));
  EXPECT_TRUE(throws_error_naming([&] { impl.alibi_bias(4, 5, 4, ref::AlibiMode::causal); }, {"alibi_bias", "seq_q", "seq_k"}));
}

INSTANTIATE_TEST_SUITE_P(Ch02, Alibi, ::testing::ValuesIn(tvlab::testing::providing(registry(), &Impl::alibi_bias)),
                         tvlab::testing::ImplName());

}  // namespace
}  // namespace tvlab::ch02
