// Chapter 02 suites over every implementation: RoPE against a complex-number oracle, the two
// layouts as one rotation, the relative-position property; the ALiBi bias; attention with RoPE
// and ALiBi inside; bad input.

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <numbers>
#include <algorithm>
#include <complex>
#include <cstdlib>
#include <tuple>
#include <limits>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "rope_configs.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/rope.hpp"
#include "tvlab/ref/alibi.hpp"

namespace tvlab::ch02 {
namespace {

using tvlab::testing::matches;
using tvlab::testing::throws_error_naming;

class Rope : public ::testing::TestWithParam<Backend> {};

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

// The worst element's pair, its partner and its position.
std::string rope_hint_at(const std::vector<std::size_t>& at, int head_dim, long long offset, RopeLayout layout) {
  const std::size_t d = at[2], pairs = static_cast<std::size_t>(head_dim) / 2;
  const bool interleaved = layout == RopeLayout::interleaved;
  const std::size_t pair = interleaved ? d / 2 : d % pairs;
  const std::size_t a = interleaved ? 2 * pair : pair, b = interleaved ? 2 * pair + 1 : pair + pairs;
  return "h " + std::to_string(at[0]) + ", token t = " + std::to_string(at[1]) + " at position p = " +
         std::to_string(offset + static_cast<long long>(at[1])) + ", coordinate d = " + std::to_string(d) +
         ": it belongs to pair i = " + std::to_string(pair) + ", coordinates (a, b) = (" + std::to_string(a) + ", " +
         std::to_string(b) + ") (" + (interleaved ? "interleaved" : "half_split") + "), angle $p\\,\\theta_{" +
         std::to_string(pair) + "}$";
}

TEST_P(Rope, matches_the_complex_rotation_oracle) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "02.1");
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
      // up to 0.004 rad; cos/sin must be formed from a double angle.
      EXPECT_TRUE(matches(impl.apply_rope(x, f, layout, c.offset), rope_oracle(x, f, layout, c.offset), {2e-6, 4e-7},
                          {"apply_rope, head_dim " + std::to_string(c.head_dim) + ", offset " + std::to_string(c.offset) +
                               (layout == RopeLayout::interleaved ? ", interleaved" : ", half_split"),
                           {"h", "t", "d"}, 0, "",
                           "pair i = (a, b) of the token at position $p$ = position_offset + t turns by the angle "
                           "$p\\,\\theta_i$ (f.inv_freq(i)), computed in double: $y_a = f\\,(x_a \\cos p\\theta_i - "
                           "x_b \\sin p\\theta_i)$, $y_b = f\\,(x_a \\sin p\\theta_i + x_b \\cos p\\theta_i)$, f = "
                           "attention_factor (1.25 here); interleaved pairs are (2i, 2i+1), half_split pairs (i, i + d/2)",
                           [&](const std::vector<std::size_t>& at) { return rope_hint_at(at, c.head_dim, c.offset, layout); }}));
    }
  }
}

TEST_P(Rope, the_two_layouts_are_one_rotation_up_to_a_permutation) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "02.1");
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
                      {"P(rope_interleaved(x)) vs rope_half_split(P x), 2 heads x 9 tokens x 16, offset 4",
                       {"h", "t", "d"}, 5, "",
                       "P sends coordinate 2i to i and 2i+1 to i + d/2: both layouts rotate the same pairs by the same "
                       "angles $p\\,\\theta_i$, so the results must agree; if only one layout passes the oracle test, "
                       "look at how the other one pairs coordinates"}));
}

TEST_P(Rope, scores_depend_only_on_the_relative_position) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "02.1");
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
        EXPECT_NEAR(lhs, rhs, 10 * 1.2e-7 * std::sqrt(32.0) * scale * 4) << (layout == RopeLayout::interleaved ? "interleaved" : "half_split") << ", m = " << m
            << ", n - m = " << delta << ": $(R_m q) \\cdot (R_n k)$ must equal $q \\cdot (R_{n-m} k)$ (rotations by "
            << "$m\\theta_i$ and $n\\theta_i$ leave the angle $(n - m)\\theta_i$); the position must enter only the angle";
      }
    }
  }
}

TEST_P(Rope, rejects_bad_input_naming_the_parameter) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "02.1");
  const RopeFrequencies f = freqs_for(8, 10000);
  EXPECT_TRUE(throws_error_naming([&] { impl.apply_rope(Tensor3(xt::ones<float>({1, 2, 7})), f, RopeLayout::half_split, 0); },
                                  {"apply_rope", "head_dim", "even"})) << "x [1, 2, 7]: odd head_dim";
  EXPECT_TRUE(throws_error_naming([&] { impl.apply_rope(Tensor3(xt::ones<float>({1, 2, 6})), f, RopeLayout::half_split, 0); },
                                  {"apply_rope", "inv_freq"})) << "x [1, 2, 6] with 4 frequencies (head_dim 8)";
  EXPECT_TRUE(throws_error_naming([&] { impl.apply_rope(Tensor3(xt::ones<float>({1, 2, 8})), f, RopeLayout::half_split, -1); },
                                  {"apply_rope", "position_offset"})) << "position_offset -1";
  Tensor3 bad = xt::ones<float>({1, 2, 8});
  bad(0, 1, 3) = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { impl.apply_rope(bad, f, RopeLayout::interleaved, 0); }, {"apply_rope", "x"}))
      << "x with NaN at (0, 1, 3)";
  bad(0, 1, 3) = -std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws_error_naming([&] { impl.apply_rope(bad, f, RopeLayout::half_split, 0); }, {"apply_rope", "x"}))
      << "x with -inf at (0, 1, 3)";
  const Tensor3 ones = xt::ones<float>({1, 2, 8});
  EXPECT_TRUE(throws_error_naming([&] { impl.apply_rope(Tensor3::from_shape({1, 0, 8}), f, RopeLayout::half_split, 0); },
                                  {"apply_rope", "x"})) << "x [1, 0, 8]: empty";
  RopeFrequencies g = f;
  g.attention_factor = 0.0;
  EXPECT_TRUE(throws_error_naming([&] { impl.apply_rope(ones, g, RopeLayout::half_split, 0); }, {"attention_factor"}))
      << "attention_factor 0";
  g.attention_factor = 1e300;
  EXPECT_TRUE(throws_error_naming([&] { impl.apply_rope(ones, g, RopeLayout::half_split, 0); }, {"attention_factor"}))
      << "attention_factor 1e300 (beyond float)";
  g = f;
  g.inv_freq(2) = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(throws_error_naming([&] { impl.apply_rope(ones, g, RopeLayout::half_split, 0); }, {"inv_freq"})) << "inv_freq(2) NaN";
  g.inv_freq(2) = 1e305;  // finite, but m theta overflows at position 1e4
  EXPECT_TRUE(throws_error_naming([&] { impl.apply_rope(ones, g, RopeLayout::half_split, 10000); }, {"inv_freq", "overflows"}))
      << "inv_freq(2) = 1e305 at position 1e4: the angle overflows double";
  // Finite x whose rotation overflows float.
  g = f;
  g.attention_factor = 2.0;
  const Tensor3 huge = xt::full_like(ones, 3e38f);
  EXPECT_TRUE(throws_error_naming([&] { impl.apply_rope(huge, g, RopeLayout::half_split, 1); }, {"apply_rope", "x", "float"}))
      << "x = 3e38 with attention_factor 2: the rotated values overflow float";
}

INSTANTIATE_TEST_SUITE_P(Ch02, Rope, ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::apply_rope)),
                         tvlab::testing::ImplName());

// ------------------------------------------------------------------------------ frequencies

class Frequencies : public ::testing::TestWithParam<Backend> {};


// theta_i = theta^(-2i/d), written as exp(-2i/d ln theta): a different formula order from the
// implementations', so agreement is not a copy.
DTensor1 closed_form_frequencies(int d, double theta) {
  DTensor1 f = DTensor1::from_shape({static_cast<std::size_t>(d / 2)});
  for (std::size_t i = 0; i < f.size(); ++i) f(i) = std::exp(-2.0 * static_cast<double>(i) / d * std::log(theta));
  return f;
}

TEST_P(Frequencies, default_is_base_to_the_minus_two_i_over_d) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "02.3");
  for (double theta : {10000.0, 500000.0}) {
    const auto f = impl.rope_frequencies(config(128, theta, "default", 1, 0, 4096), 0);
    ASSERT_EQ(f.inv_freq.size(), 64u) << "rope_type default, head_dim 128: one frequency per pair, d/2 = 64";
    for (std::size_t i = 0; i < 64; ++i)
      EXPECT_NEAR(f.inv_freq(i), std::exp(-2.0 * static_cast<double>(i) / 128 * std::log(theta)), 1e-14 * std::exp(-2.0 * static_cast<double>(i) / 128 * std::log(theta)))
          << "rope_type default, theta " << theta << ", head_dim 128, pair i = " << i
          << ": $\\theta_i = \\theta^{-2i/d}$, in double";
    EXPECT_EQ(f.attention_factor, 1.0) << "rope_type default: attention_factor 1";
  }
}

TEST_P(Frequencies, linear_divides_every_frequency_by_the_factor) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "02.3");
  const DTensor1 base = closed_form_frequencies(128, 10000);
  for (double s : {4.0, 8.0, 16.0}) {
    const auto f = impl.rope_frequencies(config(128, 10000, "linear", s, 0, 4096), 0);
    for (std::size_t i = 0; i < 64; ++i)
      EXPECT_NEAR(f.inv_freq(i), base(i) / s, 1e-14 * base(i))
          << "rope_type linear (position interpolation), factor s = " << s << ", pair i = " << i
          << ": $\\theta_i / s$ with $\\theta_i = 10000^{-2i/128}$";
  }
}

TEST_P(Frequencies, dynamic_ntk_changes_nothing_until_the_original_length) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "02.3");
  const DTensor1 base = closed_form_frequencies(128, 10000);
  const auto inside = impl.rope_frequencies(config(128, 10000, "dynamic", 4, 4096, 4096), 3000);
  for (std::size_t i = 0; i < 64; ++i)
    EXPECT_NEAR(inside.inv_freq(i), base(i), 1e-14 * base(i))
        << "rope_type dynamic, seq_len 3000 <= max_position_embeddings 4096, pair i = " << i
        << ": no change, $\\theta_i = 10000^{-2i/128}$";
  // At n = 2L with s = 4: base' = 10000 * (4 * 2 - 3)^(128/126) = 10000 * 5^(64/63).
  const auto beyond = impl.rope_frequencies(config(128, 10000, "dynamic", 4, 4096, 4096), 8192);
  const double new_base = 10000 * std::pow(5.0, 128.0 / 126.0);
  for (std::size_t i = 0; i < 64; ++i)
    EXPECT_NEAR(beyond.inv_freq(i), std::pow(new_base, -2.0 * static_cast<double>(i) / 128), 1e-14 * std::pow(new_base, -2.0 * static_cast<double>(i) / 128))
        << "rope_type dynamic, s = 4, seq_len n = 8192 over L = 4096, pair i = " << i
        << ": base' = $\\theta\\,(s\\,n/L - (s - 1))^{d/(d-2)}$ = " << new_base << ", then $\\text{base'}^{-2i/d}$";
}

// YaRN, from its definition: the pair i completes r_i = L theta_i / (2 pi) rotations over the
// original length L. Pairs with r_i > beta_fast keep theta_i, pairs with r_i < beta_slow get
// theta_i / s; between them a linear ramp over the pair index (Hugging Face's definition), from
// the (floored) index where r = beta_fast to the (ceiled) index where r = beta_slow.
TEST_P(Frequencies, yarn_keeps_fast_pairs_interpolates_slow_pairs_and_ramps_between) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "02.3");
  for (double theta : {10000.0, 500000.0})
    for (long long original : {4096LL, 8192LL})
      for (double s : {4.0, 8.0, 16.0}) {
        const DTensor1 base = closed_form_frequencies(128, theta);
        const auto f = impl.rope_frequencies(config(128, theta, "yarn", s, original, static_cast<long long>(s) * original), 0);
        // The index where r_i equals beta: L base^(-2i/d) / (2 pi) = beta.
        auto index_where = [&](double beta) {
          return 128 * std::log(static_cast<double>(original) / (2 * std::numbers::pi * beta)) / (2 * std::log(theta));
        };
        const double low = std::max(0.0, std::floor(index_where(32))), high = std::min(127.0, std::ceil(index_where(1)));
        for (std::size_t i = 0; i < 64; ++i) {
          const double x = static_cast<double>(i);
          const double ramp = std::clamp((x - low) / (high - low), 0.0, 1.0);
          const double expected = base(i) * (1 - ramp) + base(i) / s * ramp;
          EXPECT_NEAR(f.inv_freq(i), expected, 1e-14 * base(i))
              << "rope_type yarn, theta " << theta << ", L " << original << ", s " << s << ", pair i = " << i
              << ": ramp $\\gamma = \\mathrm{clamp}((i - " << low << ") / (" << high << " - " << low << "), 0, 1)$ = " << ramp
              << ", expected $\\theta_i (1 - \\gamma) + \\theta_i \\gamma / s$ (the ramp from the floored index where "
              << "$r = \\beta_\\text{fast} = 32$ turns to the ceiled index where $r = \\beta_\\text{slow} = 1$)";
        }
        EXPECT_EQ(f.inv_freq(0), base(0)) << "rope_type yarn, theta " << theta << ", L " << original << ", s " << s
                                          << ": the fastest pair (i = 0) must be extrapolated unchanged";
        EXPECT_NEAR(f.attention_factor, 0.1 * std::log(s) + 1, 1e-15)  // sqrt(1/t) = 0.1 ln s + 1
            << "rope_type yarn, s = " << s << ": attention_factor $0.1 \\ln s + 1$";
      }
}

// The paper's definition, independent of Hugging Face's floor/ceil: a pair making more than
// beta_fast = 32 turns in L keeps theta_i, one making fewer than beta_slow = 1 turn gets theta_i / s.
TEST_P(Frequencies, yarn_regions_follow_the_turns_each_pair_makes_in_the_original_length) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "02.3");
  for (double theta : {10000.0, 500000.0})
    for (long long L : {4096LL, 8192LL}) {
      const double s = 8;
      const DTensor1 base = closed_form_frequencies(128, theta);
      const auto f = impl.rope_frequencies(config(128, theta, "yarn", s, L, 8 * L), 0);
      int kept = 0, interpolated = 0;
      for (std::size_t i = 0; i < 64; ++i) {
        const double turns = static_cast<double>(L) * base(i) / (2 * std::numbers::pi);
        if (turns > 32) {
          EXPECT_NEAR(f.inv_freq(i), base(i), 1e-14 * base(i))
              << "rope_type yarn, theta " << theta << ", L " << L << ", s 8: pair " << i << " makes " << turns
              << " turns in L (more than beta_fast = 32): it keeps $\\theta_i$";
          ++kept;
        }
        if (turns < 1) {
          EXPECT_NEAR(f.inv_freq(i), base(i) / s, 1e-14 * base(i))
              << "rope_type yarn, theta " << theta << ", L " << L << ", s 8: pair " << i << " makes " << turns
              << " turns in L (fewer than beta_slow = 1): it gets $\\theta_i / s$";
          ++interpolated;
        }
        if (turns >= 1 && turns <= 32) {
          EXPECT_GE(f.inv_freq(i), base(i) / s * (1 - 1e-14))
              << "rope_type yarn, theta " << theta << ", L " << L << ", s 8: pair " << i << " makes " << turns
              << " turns (between beta_slow and beta_fast): its frequency lies between $\\theta_i / s$ and $\\theta_i$";
        }
      }
      EXPECT_GT(kept, 10) << "theta " << theta << ", L " << L << ": too few pairs above beta_fast (the test's own setup)";
      EXPECT_GT(interpolated, 10) << "theta " << theta << ", L " << L << ": too few pairs below beta_slow (the test's own setup)";
    }
}

TEST_P(Frequencies, dynamic_ntk_measures_length_in_max_position_embeddings) {
  // Hugging Face's dynamic NTK uses max_position_embeddings as L and ignores
  // original_max_position_embeddings (yarn uses the latter).
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "02.3");
  const auto a = impl.rope_frequencies(config(64, 10000, "dynamic", 2, 0, 2048), 4096);
  const auto b = impl.rope_frequencies(config(64, 10000, "dynamic", 2, 1024, 2048), 4096);
  const double new_base = 10000 * std::pow(2.0 * 4096 / 2048 - 1, 64.0 / 62.0);
  for (std::size_t i = 0; i < 32; ++i) {
    EXPECT_EQ(a.inv_freq(i), b.inv_freq(i))
        << "rope_type dynamic, pair " << i << ": original_max_position_embeddings (0 vs 1024) must not matter; "
        << "L is max_position_embeddings = 2048";
    EXPECT_NEAR(a.inv_freq(i), std::pow(new_base, -2.0 * static_cast<double>(i) / 64), 1e-14)
        << "rope_type dynamic, s = 2, n = 4096, L = 2048, head_dim 64, pair " << i
        << ": base' = $\\theta\\,(s\\,n/L - (s - 1))^{d/(d-2)}$ = " << new_base;
  }
  // seq_len 0 means max_position_embeddings: no change.
  const auto c = impl.rope_frequencies(config(64, 10000, "dynamic", 2, 0, 2048), 0);
  const DTensor1 base = closed_form_frequencies(64, 10000);
  for (std::size_t i = 0; i < 32; ++i)
    EXPECT_NEAR(c.inv_freq(i), base(i), 1e-14 * base(i))
        << "rope_type dynamic, seq_len 0 (means max_position_embeddings), pair " << i << ": no change";
}

TEST_P(Frequencies, yarn_measures_the_correction_range_in_the_original_length) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "02.3");
  // The same original length with a different extended length gives the same frequencies; a
  // different original length moves the ramp.
  const auto a = impl.rope_frequencies(config(128, 10000, "yarn", 4, 4096, 16384), 0);
  const auto b = impl.rope_frequencies(config(128, 10000, "yarn", 4, 4096, 65536), 0);
  const auto c = impl.rope_frequencies(config(128, 10000, "yarn", 4, 8192, 16384), 0);
  bool differs = false;
  for (std::size_t i = 0; i < 64; ++i) {
    EXPECT_EQ(a.inv_freq(i), b.inv_freq(i))
        << "rope_type yarn, s 4, L 4096, pair " << i << ": max_position_embeddings (16384 vs 65536) must not matter; "
        << "the turns $r_i = L\\,\\theta_i / 2\\pi$ use original_max_position_embeddings";
    differs = differs || a.inv_freq(i) != c.inv_freq(i);
  }
  EXPECT_TRUE(differs) << "rope_type yarn: original_max_position_embeddings 4096 and 8192 give the same frequencies; "
                       << "the turns $r_i = L\\,\\theta_i / 2\\pi$ must use L = original_max_position_embeddings";
}

TEST_P(Frequencies, yarn_attention_factor_variants) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "02.3");
  RopeConfig c = config(128, 10000, "yarn", 40, 4096, 163840);
  c.rope_scaling.mscale = 1.0;
  c.rope_scaling.mscale_all_dim = 1.0;  // DeepSeek-V3: the ratio is 1, cos/sin unscaled
  EXPECT_EQ(impl.rope_frequencies(c, 0).attention_factor, 1.0)
      << "yarn, s 40, mscale = mscale_all_dim = 1: attention_factor = "
      << "$(0.1\\,\\text{mscale} \\ln s + 1) / (0.1\\,\\text{mscale\\_all\\_dim} \\ln s + 1)$ = 1";
  c.rope_scaling.mscale = 0.707;
  EXPECT_NEAR(impl.rope_frequencies(c, 0).attention_factor, (0.1 * 0.707 * std::log(40) + 1) / (0.1 * std::log(40) + 1), 1e-15)
      << "yarn, s 40, mscale 0.707, mscale_all_dim 1: attention_factor = "
      << "$(0.1\\,\\text{mscale} \\ln s + 1) / (0.1\\,\\text{mscale\\_all\\_dim} \\ln s + 1)$";
  c.rope_scaling.attention_factor = 1.5;  // explicit wins
  EXPECT_EQ(impl.rope_frequencies(c, 0).attention_factor, 1.5)
      << "yarn with rope_scaling.attention_factor = 1.5 set: the explicit value wins over mscale";
  c.rope_scaling.attention_factor.reset();
  c.rope_scaling.mscale_all_dim = 0.0;  // a zero mscale_all_dim falls back to 0.1 ln s + 1
  EXPECT_NEAR(impl.rope_frequencies(c, 0).attention_factor, 0.1 * std::log(40) + 1, 1e-15)
      << "yarn, s 40, mscale_all_dim 0: falls back to $0.1 \\ln s + 1$";
}

TEST_P(Frequencies, rejects_bad_configurations_naming_the_field) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "02.3");
  EXPECT_TRUE(throws_error_naming([&] { impl.rope_frequencies(config(7, 10000, "default", 1, 0, 8), 0); }, {"head_dim", "even"})) << "head_dim 7: odd";
  EXPECT_TRUE(throws_error_naming([&] { impl.rope_frequencies(config(8, 1, "default", 1, 0, 8), 0); }, {"rope_theta"})) << "rope_theta 1: every frequency would be 1";
  EXPECT_TRUE(throws_error_naming([&] { impl.rope_frequencies(config(8, 10000, "ntk", 2, 0, 8), 0); }, {"rope_type", "ntk"})) << "rope_type \"ntk\": not a known type";
  EXPECT_TRUE(throws_error_naming([&] { impl.rope_frequencies(config(8, 10000, "linear", 0.5, 0, 8), 0); }, {"factor"})) << "linear factor 0.5 (< 1)";
  RopeConfig c = config(8, 10000, "yarn", 2, 0, 8);
  c.rope_scaling.beta_fast = 0.5;
  EXPECT_TRUE(throws_error_naming([&] { impl.rope_frequencies(c, 0); }, {"beta_fast", "beta_slow"})) << "yarn with beta_fast 0.5 < beta_slow 1";
  EXPECT_TRUE(throws_error_naming([&] { impl.rope_frequencies(config(8, 10000, "dynamic", 2, 0, 8), -1); }, {"seq_len"})) << "seq_len -1";
  EXPECT_TRUE(throws_error_naming([&] { impl.rope_frequencies(config(8, 10000, "yarn", 2, 0, 0), 0); },
                                  {"max_position_embeddings"})) << "yarn with max_position_embeddings 0";
  EXPECT_TRUE(throws_error_naming([&] { impl.rope_frequencies(config(8, 10000, "yarn", 2, -5, 8), 0); },
                                  {"original_max_position_embeddings"})) << "original_max_position_embeddings -5";
  EXPECT_TRUE(throws_error_naming(
      [&] { impl.rope_frequencies(config(8, std::numeric_limits<double>::quiet_NaN(), "default", 1, 0, 8), 0); },
      {"rope_theta"})) << "rope_theta NaN";
  c = config(8, 10000, "yarn", 2, 0, 8);
  c.rope_scaling.attention_factor = 0.0;
  EXPECT_TRUE(throws_error_naming([&] { impl.rope_frequencies(c, 0); }, {"rope_scaling.attention_factor"})) << "rope_scaling.attention_factor 0";
  c = config(8, 10000, "yarn", 2, 0, 8);
  c.rope_scaling.mscale = -1.0;
  EXPECT_TRUE(throws_error_naming([&] { impl.rope_frequencies(c, 0); }, {"rope_scaling.mscale ("})) << "rope_scaling.mscale -1";
  c = config(8, 10000, "yarn", 2, 0, 8);
  c.rope_scaling.mscale_all_dim = -1.0;
  EXPECT_TRUE(throws_error_naming([&] { impl.rope_frequencies(c, 0); }, {"rope_scaling.mscale_all_dim"})) << "rope_scaling.mscale_all_dim -1";
}

INSTANTIATE_TEST_SUITE_P(Ch02, Frequencies, ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::rope_frequencies)),
                         tvlab::testing::ImplName());

// ------------------------------------------------------------------------------------------ ALiBi

class Alibi : public ::testing::TestWithParam<Backend> {};

// The worst element's bias with the case's numbers: the shifted query position, the slope, the distance.
std::string alibi_hint_at(const std::vector<std::size_t>& at, const DTensor1& slopes, long long seq_q, long long seq_k,
                          ref::AlibiMode mode) {
  const long long i = static_cast<long long>(at[1]), j = static_cast<long long>(at[2]);
  const long long position = i + seq_k - seq_q;
  std::ostringstream out;
  out << "bias(h=" << at[0] << ", i=" << i << ", j=" << j << "): $i'$ = " << i << " + " << seq_k << " - " << seq_q
      << " = " << position << ", $m_" << at[0] << "$ = " << slopes(at[0]);
  if (mode == ref::AlibiMode::causal && j > position)
    out << "; key " << j << " comes after the query: $-\\infty$";
  else
    out << ", $|i' - j|$ = " << std::llabs(position - j) << ": expected " << -slopes(at[0]) * static_cast<double>(std::llabs(position - j));
  return out.str();
}

TEST_P(Alibi, bias_is_minus_slope_times_distance) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "02.2");
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
                           {"h", "i", "j"}, 0, "",
                           "bias(h, i, j) = $-m_h\\,|i' - j|$ with the query at position $i' = i + \\text{seq\\_k} - "
                           "\\text{seq\\_q}$ (the queries are the last keys) and the slope $m_h$ of alibi_slopes(heads); "
                           "causal: $-\\infty$ where $j > i'$",
                           [&](const std::vector<std::size_t>& at) { return alibi_hint_at(at, m, nq, nk, mode); }}));
    }
}

TEST_P(Alibi, symmetric_bias_with_more_queries_than_keys) {
  // Encoders may attend from more queries than keys: i' = i + seq_k - seq_q is then negative
  // for the first queries, and the bias is still -m_h |i' - j|.
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "02.2");
  const Tensor3 b = impl.alibi_bias(2, 9, 4, ref::AlibiMode::symmetric);
  const DTensor1 m = ref::alibi_slopes(2);
  DTensor3 expected = DTensor3::from_shape({2, 9, 4});
  for (std::size_t h = 0; h < 2; ++h)
    for (long long i = 0; i < 9; ++i)
      for (long long j = 0; j < 4; ++j) expected(h, i, j) = -m(h) * static_cast<double>(std::llabs(i + 4 - 9 - j));
  EXPECT_TRUE(matches(b, expected, {0.0, 2.4e-7},
                      {"alibi_bias symmetric, 2 heads, 9 x 4", {"h", "i", "j"}, 0, "",
                       "bias(h, i, j) = $-m_h\\,|i' - j|$ with $i' = i + \\text{seq\\_k} - \\text{seq\\_q}$, negative "
                       "for the first queries here (seq_q > seq_k): compute it in signed arithmetic",
                       [&](const std::vector<std::size_t>& at) { return alibi_hint_at(at, m, 9, 4, ref::AlibiMode::symmetric); }}));
}

TEST_P(Alibi, rejects_bad_input_naming_the_parameter) {
  const Backend& impl = GetParam();
  TVLAB_EXERCISE(impl, "02.2");
  EXPECT_TRUE(throws_error_naming([&] { impl.alibi_bias(0, 4, 4, ref::AlibiMode::causal); }, {"alibi_bias", "num_heads"}))
      << "num_heads 0";
  EXPECT_TRUE(throws_error_naming([&] { impl.alibi_bias(4, 0, 4, ref::AlibiMode::causal); }, {"alibi_bias", "seq_q"}))
      << "seq_q 0";
  EXPECT_TRUE(throws_error_naming([&] { impl.alibi_bias(4, 5, 4, ref::AlibiMode::causal); }, {"alibi_bias", "seq_q", "seq_k"}))
      << "causal with seq_q 5 > seq_k 4: the first query would see no key";
  EXPECT_TRUE(throws_error_naming([&] { impl.alibi_bias(4, 5, 0, ref::AlibiMode::symmetric); }, {"alibi_bias", "seq_k"}))
      << "seq_k 0";
}

INSTANTIATE_TEST_SUITE_P(Ch02, Alibi, ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::alibi_bias)),
                         tvlab::testing::ImplName());

// ------------------------------------------------------------------- attention with positions

class PositionalAttention : public ::testing::TestWithParam<Backend> {};

// Oracle in double, independent of tvlab::ref: rotate q and k with rope_oracle at the positions
// AttentionRope defines (key j at p0 + j, query i at p0 + seq_k - seq_q + i), S = scale q k^T
// - m_h |i' - j|, causal -inf, softmax, P V. Also returns max_ij (scale sum_c |q_ic k_jc| + |bias|),
// the size of the terms in a score.
struct OracleResult {
  DTensor3 out;
  double score_magnitude = 0.0;
};

OracleResult positional_attention_oracle(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                         const std::optional<AttentionRope>& rope, const AttentionConfig& cfg) {
  const std::size_t heads = q.shape()[0], nq = q.shape()[1], nk = k.shape()[1], d = q.shape()[2], dv = v.shape()[2];
  const double scale = cfg.scale.value_or(1.0 / std::sqrt(static_cast<double>(d)));
  DTensor3 qr = xt::cast<double>(q), kr = xt::cast<double>(k);
  if (rope) {
    const long long p0 = rope->first_position;
    qr = rope_oracle(q, rope->freqs, rope->layout, p0 + static_cast<long long>(nk - nq));
    kr = rope_oracle(k, rope->freqs, rope->layout, p0);
  }
  OracleResult r{DTensor3::from_shape({heads, nq, dv}), 0.0};
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < nq; ++i) {
      const long long query_position = static_cast<long long>(i + nk - nq);
      std::vector<double> s(nk, -std::numeric_limits<double>::infinity());
      double m = -std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j < nk; ++j) {
        if (cfg.mask.causal && static_cast<long long>(j) > query_position) continue;
        double dot = 0.0, magnitude = 0.0;
        for (std::size_t c = 0; c < d; ++c) {
          dot += qr(h, i, c) * kr(h, j, c);
          magnitude += std::fabs(qr(h, i, c) * kr(h, j, c));
        }
        const double bias = cfg.mask.alibi_slopes ? -(*cfg.mask.alibi_slopes)(h) * std::fabs(static_cast<double>(query_position) -
                                                                                    static_cast<double>(j))
                                             : 0.0;
        s[j] = scale * dot + bias;
        m = std::max(m, s[j]);
        r.score_magnitude = std::max(r.score_magnitude, scale * magnitude + std::fabs(bias));
      }
      double l = 0.0;
      for (double& x : s) l += (x = std::exp(x - m));
      for (std::size_t c = 0; c < dv; ++c) {
        double acc = 0.0;
        for (std::size_t j = 0; j < nk; ++j) acc += s[j] * v(h, j, c);
        r.out(h, i, c) = acc / l;
      }
    }
  return r;
}

TEST_P(PositionalAttention, rope_and_alibi_inside_attention_match_the_oracle) {
  const Backend& impl = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  struct Case {
    std::string label;
    std::size_t heads, seq_q, seq_k, head_dim;
    bool causal, rope, alibi;
    RopeLayout layout;
    long long first_position;
  };
  const Case cases[] = {
      {"rope interleaved, one token", 1, 1, 1, 2, true, true, false, RopeLayout::interleaved, 0},
      {"rope interleaved, causal", 2, 7, 7, 8, true, true, false, RopeLayout::interleaved, 0},
      {"rope half_split, yarn x8, 5 queries over 19 keys at 1000", 3, 5, 19, 64, true, true, false,
       RopeLayout::half_split, 1000},
      {"alibi symmetric (encoder)", 4, 33, 33, 16, false, false, true, RopeLayout::half_split, 0},
      {"alibi causal, 12 heads, 3 queries over 40 keys", 12, 3, 40, 8, true, false, true, RopeLayout::half_split, 0},
      {"rope and alibi, causal, seq 129", 2, 129, 129, 32, true, true, true, RopeLayout::half_split, 7},
  };
  for (const Case& c : cases) {
    const std::uint64_t seed = 17 + c.seq_k;
    Rng rng(seed);
    const Tensor3 q = rng.normal_tensor(c.heads, c.seq_q, c.head_dim), k = rng.normal_tensor(c.heads, c.seq_k, c.head_dim);
    const Tensor3 v = rng.normal_tensor(c.heads, c.seq_k, c.head_dim);
    AttentionConfig cfg;
    cfg.mask.causal = c.causal;
    std::optional<AttentionRope> rope;
    if (c.rope) {
      RopeConfig rc;
      rc.head_dim = static_cast<int>(c.head_dim);
      rc.max_position_embeddings = 32768;
      if (c.first_position >= 1000) {  // a YaRN configuration, with its attention factor
        rc.rope_scaling.rope_type = "yarn";
        rc.rope_scaling.factor = 8;
        rc.rope_scaling.original_max_position_embeddings = 4096;
      }
      rope = AttentionRope{ref::rope_frequencies(rc), c.layout, c.first_position};
    }
    if (c.alibi) cfg.mask.alibi_slopes = ref::alibi_slopes(static_cast<int>(c.heads));
    const OracleResult expected = positional_attention_oracle(q, k, v, rope, cfg);
    // As in chapter 00: a score is a length-d dot product (plus the bias) with float error
    // ~ eps sqrt(d) M, M = max scale sum |q k| + |bias| after rotation; P V adds a length-seq_k
    // reduction. rtol = 10 eps sqrt(K), atol = rtol max|v| (2M + 1).
    const double rtol = tvlab::testing::reduction_rtol(std::max(c.head_dim, c.seq_k));
    const double vmax = xt::amax(xt::abs(v))();
    const Tensor3 got = rope ? impl.rope_attention(q, k, v, *rope, cfg) : impl.attention(q, k, v, cfg);
    EXPECT_TRUE(matches(got, expected.out, {rtol * vmax * (2 * expected.score_magnitude + 1), rtol},
                        {(rope ? "rope_attention with " : "scaled_dot_product_attention with ") + c.label, {"h", "i", "d"}, seed, "",
                         "query i sits at position p0 + seq_k - seq_q + i, key j at p0 + j; ALiBi adds -m_h |i' - j|"}));
  }
}

TEST_P(PositionalAttention, rope_attention_is_unchanged_by_a_common_shift_of_positions) {
  // RoPE makes scores depend on i - j only: moving every position by the same amount leaves the
  // attention output unchanged (up to rounding), whatever the absolute position.
  const Backend& impl = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  Rng rng(23);
  const Tensor3 q = rng.normal_tensor(2, 6, 16), k = rng.normal_tensor(2, 10, 16), v = rng.normal_tensor(2, 10, 16);
  RopeConfig rc;
  rc.head_dim = 16;
  AttentionConfig causal;
  causal.mask.causal = true;
  const AttentionRope at0{ref::rope_frequencies(rc), RopeLayout::interleaved, 0};
  const Tensor3 reference = impl.rope_attention(q, k, v, at0, causal);
  for (long long shift : {1LL, 100LL, 5000LL}) {
    AttentionRope shifted = at0;
    shifted.first_position = shift;
    // Both runs round differently (cos/sin of different angles): a few float reductions apart.
    const double rtol = tvlab::testing::reduction_rtol(16);
    EXPECT_TRUE(matches(impl.rope_attention(q, k, v, shifted, causal), xt::eval(xt::cast<double>(reference)), {rtol * 16, rtol},
                        {"attention with RoPE, positions shifted by " + std::to_string(shift), {"h", "i", "d"}, 23, "",
                         "rotate q and k with the same position origin"}));
  }
}

TEST_P(PositionalAttention, rejects_bad_positions_naming_the_parameter) {
  const Backend& impl = GetParam();
  const Tensor3 q = xt::ones<float>({2, 3, 8}), k = xt::ones<float>({2, 3, 8});
  RopeConfig rc;
  rc.head_dim = 8;
  AttentionConfig cfg;
  cfg.mask.alibi_slopes = ref::alibi_slopes(3);
  EXPECT_TRUE(throws_error_naming([&] { impl.attention(q, k, k, cfg); }, {"mask.alibi_slopes", "heads"}));
  cfg.mask.alibi_slopes = DTensor1{0.5, std::numeric_limits<double>::quiet_NaN()};
  EXPECT_TRUE(throws_error_naming([&] { impl.attention(q, k, k, cfg); }, {"mask.alibi_slopes"}));
  cfg.mask.alibi_slopes = DTensor1{0.5, -0.25};
  EXPECT_TRUE(throws_error_naming([&] { impl.attention(q, k, k, cfg); }, {"mask.alibi_slopes", ">= 0"}));
  cfg.mask.alibi_slopes.reset();
  rc.head_dim = 10;  // five frequencies for four pairs
  AttentionRope rope{ref::rope_frequencies(rc), RopeLayout::half_split, 0};
  EXPECT_TRUE(throws_error_naming([&] { impl.rope_attention(q, k, k, rope, cfg); }, {"inv_freq", "head_dim / 2"}));
  rc.head_dim = 8;
  rope = AttentionRope{ref::rope_frequencies(rc), RopeLayout::half_split, 0};
  rope.freqs.attention_factor = -1.0;
  EXPECT_TRUE(throws_error_naming([&] { impl.rope_attention(q, k, k, rope, cfg); }, {"attention_factor"}));
  rope = AttentionRope{ref::rope_frequencies(rc), RopeLayout::half_split, -3};
  EXPECT_TRUE(throws_error_naming([&] { impl.rope_attention(q, k, k, rope, cfg); }, {"rope.first_position"}));
  rope.first_position = 0;
  const Tensor3 long_q = xt::ones<float>({2, 4, 8});
  EXPECT_TRUE(throws_error_naming([&] { impl.rope_attention(long_q, k, k, rope, cfg); }, {"seq_q", "seq_k", "positions"}));
  // The attention's own checks still run, under rope_attention's name.
  EXPECT_TRUE(throws_error_naming([&] { impl.rope_attention(q, Tensor3(xt::ones<float>({3, 3, 8})), k, rope, cfg); },
                                  {"rope_attention", "k", "heads"}));
}

// The exercise program's registry has no attention: nothing to instantiate there.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PositionalAttention);
INSTANTIATE_TEST_SUITE_P(Ch02, PositionalAttention,
                         ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::attention)),
                         tvlab::testing::ImplName());

}  // namespace
}  // namespace tvlab::ch02
