// Chapter 02: the rope types and fields Hugging Face added after the classic four (llama3,
// longrope, partial_rotary_factor, YaRN's truncate) against double-precision oracles written from
// the papers' formulas, partial rotation on every backend, and the config.json reader.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "tvlab/core/rng.hpp"
#include "rope_configs.hpp"
#include "tvlab/core/rope_hf_config.hpp"
#include "tvlab/ref/attention.hpp"
#include "tvlab/ref/rope.hpp"

namespace tvlab::ch02 {
namespace {

using tvlab::testing::throws_error_naming;
constexpr double kPi = std::numbers::pi;

RopeConfig scaled(const std::string& type, int head_dim, double theta, double factor, long long original,
                  long long max_pos) {
  return config(head_dim, theta, type, factor, original, max_pos);
}

// theta_i = base^(-2i/d) for i < d/2, written as exp(-(2i/d) ln base) (not the code's pow).
double plain_theta(double base, std::size_t i, int d) { return std::exp(-2.0 * static_cast<double>(i) / d * std::log(base)); }

// Relative agreement of two frequency lists, with the worst pair in the message.
::testing::AssertionResult same_frequencies(const DTensor1& got, const std::vector<double>& want, double rtol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "got " << got.size() << " frequencies, expected " << want.size();
  for (std::size_t i = 0; i < want.size(); ++i)
    if (!(std::fabs(got(i) - want[i]) <= rtol * std::fabs(want[i])))
      return ::testing::AssertionFailure() << "pair " << i << ": theta'_i = " << got(i) << ", the formula gives "
                                           << want[i] << " (relative error "
                                           << std::fabs(got(i) - want[i]) / std::fabs(want[i]) << " > " << rtol << ")";
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------------------- llama3

// Llama 3.1 (Meta's reference code; Hugging Face `_compute_llama3_parameters`): the ratio
// r_i = L / lambda_i of the original length to the wavelength decides: r > high keeps theta,
// r < low gives theta / s, between the two theta (g + (1 - g) / s) with g = (r - low) / (high - low).
std::vector<double> llama3_oracle(const RopeConfig& c) {
  const RopeScaling& sc = c.rope_scaling;
  std::vector<double> out;
  for (std::size_t i = 0; i < static_cast<std::size_t>(c.head_dim / 2); ++i) {
    const double theta = plain_theta(c.rope_theta, i, c.head_dim);
    const double r = static_cast<double>(sc.original_max_position_embeddings) * theta / (2 * kPi);
    const double g = std::clamp((r - sc.low_freq_factor) / (sc.high_freq_factor - sc.low_freq_factor), 0.0, 1.0);
    out.push_back(theta * (g + (1 - g) / sc.factor));
  }
  return out;
}

TEST(Ch02Llama3, matches_the_smoothing_formula_for_llama_3_1) {
  // Llama 3.1 8B: head_dim 128, rope_theta 500000, factor 8, low 1, high 4, L 8192.
  RopeConfig c = scaled("llama3", 128, 5e5, 8, 8192, 131072);
  c.rope_scaling.low_freq_factor = 1;
  c.rope_scaling.high_freq_factor = 4;
  const RopeFrequencies f = ref::rope_frequencies(c);
  EXPECT_TRUE(same_frequencies(f.inv_freq, llama3_oracle(c), 1e-13));
  EXPECT_EQ(f.attention_factor, 1.0);
  // All three regions occur: pair 0 kept, pair 63 divided by 8, some pair strictly between.
  EXPECT_NEAR(f.inv_freq(0), 1.0, 1e-15);
  EXPECT_NEAR(f.inv_freq(63) / plain_theta(5e5, 63, 128), 1.0 / 8, 1e-13);
  int blended = 0;
  for (std::size_t i = 0; i < 64; ++i) {
    const double ratio = f.inv_freq(i) / plain_theta(5e5, i, 128);
    blended += ratio > 1.0 / 8 + 1e-9 && ratio < 1 - 1e-9 ? 1 : 0;
  }
  EXPECT_GT(blended, 0) << "no pair in the smooth region: the test configuration does not exercise it";
}

TEST(Ch02Llama3, smooth_region_meets_both_neighbours_at_its_end_points) {
  // Put the band's ends exactly on pairs 10 and 20: low_freq_factor = L / lambda_20 and
  // high_freq_factor = L / lambda_10. At the ends the blend must equal the neighbouring rule:
  // pair 10 keeps theta (g = 1), pair 20 gets theta / s (g = 0); between, the formula.
  RopeConfig c = scaled("llama3", 64, 1e4, 4, 4096, 16384);
  const double L = 4096;
  const double lambda10 = 2 * kPi / plain_theta(1e4, 10, 64), lambda20 = 2 * kPi / plain_theta(1e4, 20, 64);
  c.rope_scaling.low_freq_factor = L / lambda20;
  c.rope_scaling.high_freq_factor = L / lambda10;
  const RopeFrequencies f = ref::rope_frequencies(c);
  EXPECT_NEAR(f.inv_freq(10) / plain_theta(1e4, 10, 64), 1.0, 1e-12) << "high-frequency end of the band";
  EXPECT_NEAR(f.inv_freq(20) / plain_theta(1e4, 20, 64), 0.25, 1e-12) << "low-frequency end of the band";
  EXPECT_TRUE(same_frequencies(f.inv_freq, llama3_oracle(c), 1e-12));
  // Strictly inside: strictly between theta / s and theta, decreasing in i.
  for (std::size_t i = 11; i < 20; ++i) {
    const double ratio = f.inv_freq(i) / plain_theta(1e4, i, 64);
    EXPECT_GT(ratio, 0.25) << "pair " << i;
    EXPECT_LT(ratio, 1.0) << "pair " << i;
  }
}

TEST(Ch02Llama3, rejects_bad_fields_naming_them) {
  RopeConfig c = scaled("llama3", 64, 1e4, 8, 8192, 131072);
  c.rope_scaling.low_freq_factor = 4;
  c.rope_scaling.high_freq_factor = 4;
  EXPECT_TRUE(throws_error_naming([&] { ref::rope_frequencies(c); }, {"high_freq_factor", "low_freq_factor"}));
  c.rope_scaling.low_freq_factor = 0;
  EXPECT_TRUE(throws_error_naming([&] { ref::rope_frequencies(c); }, {"low_freq_factor"}));
  c.rope_scaling.low_freq_factor = 1;
  c.rope_scaling.original_max_position_embeddings = 0;
  EXPECT_TRUE(throws_error_naming([&] { ref::rope_frequencies(c); }, {"original_max_position_embeddings", "llama3"}));
}

// -------------------------------------------------------------------------------------- longrope

RopeConfig longrope(int head_dim, long long original, long long max_pos) {
  RopeConfig c = scaled("longrope", head_dim, 1e4, static_cast<double>(max_pos) / original, original, max_pos);
  for (int i = 0; i < head_dim / 2; ++i) {
    c.rope_scaling.short_factor.push_back(1.0 + 0.01 * i);
    c.rope_scaling.long_factor.push_back(1.0 + 0.5 * i);
  }
  return c;
}

TEST(Ch02LongRope, divides_each_frequency_by_its_factor_and_switches_lists_after_the_original_length) {
  const RopeConfig c = longrope(16, 4096, 131072);
  std::vector<double> short_theta, long_theta;
  for (std::size_t i = 0; i < 8; ++i) {
    short_theta.push_back(plain_theta(1e4, i, 16) / c.rope_scaling.short_factor[i]);
    long_theta.push_back(plain_theta(1e4, i, 16) / c.rope_scaling.long_factor[i]);
  }
  // LongRoPE (Ding et al. 2024): short factors up to L = 4096 (and when no length is given), long beyond.
  EXPECT_TRUE(same_frequencies(ref::rope_frequencies(c, 0).inv_freq, short_theta, 1e-14)) << "no length given";
  EXPECT_TRUE(same_frequencies(ref::rope_frequencies(c, 4096).inv_freq, short_theta, 1e-14)) << "seq_len = L";
  EXPECT_TRUE(same_frequencies(ref::rope_frequencies(c, 4097).inv_freq, long_theta, 1e-14)) << "seq_len = L + 1";
  // Attention factor sqrt(1 + ln s / ln L), s = 131072 / 4096 = 32 (Phi-3's 128k models).
  EXPECT_NEAR(ref::rope_frequencies(c, 0).attention_factor, std::sqrt(1 + std::log(32.0) / std::log(4096.0)), 1e-15);
}

TEST(Ch02LongRope, attention_factor_given_or_one_without_extension) {
  RopeConfig c = longrope(8, 4096, 4096);
  c.rope_scaling.factor = 1;
  EXPECT_EQ(ref::rope_frequencies(c).attention_factor, 1.0);
  c.rope_scaling.factor = 16;
  c.rope_scaling.attention_factor = 1.25;
  EXPECT_EQ(ref::rope_frequencies(c).attention_factor, 1.25);
}

TEST(Ch02LongRope, rejects_lists_of_the_wrong_length_or_with_bad_values) {
  RopeConfig c = longrope(16, 4096, 131072);
  c.rope_scaling.short_factor.pop_back();
  EXPECT_TRUE(throws_error_naming([&] { ref::rope_frequencies(c); }, {"short_factor", "7", "8"}));
  c = longrope(16, 4096, 131072);
  c.rope_scaling.long_factor[3] = -1;
  EXPECT_TRUE(throws_error_naming([&] { ref::rope_frequencies(c); }, {"long_factor[3]"}));
  c.rope_scaling.long_factor[3] = std::nan("");
  EXPECT_TRUE(throws_error_naming([&] { ref::rope_frequencies(c); }, {"long_factor[3]"}));
}

// ------------------------------------------------------------------------------------ yarn truncate

// YaRN's ramp over pair indices between the correction dimensions of beta_fast and beta_slow
// (Peng et al. 2023, eq. 17-18), rounded outwards to whole pairs or not.
std::vector<double> yarn_oracle(const RopeConfig& c, bool truncate) {
  const RopeScaling& sc = c.rope_scaling;
  const int d = c.head_dim;
  auto dim_of = [&](double turns) {  // solve L theta_i / (2 pi) = turns for i
    return d / 2.0 * std::log(static_cast<double>(sc.original_max_position_embeddings) / (2 * kPi * turns)) /
           std::log(c.rope_theta);
  };
  double lo = dim_of(sc.beta_fast), hi = dim_of(sc.beta_slow);
  if (truncate) {
    lo = std::floor(lo);
    hi = std::ceil(hi);
  }
  lo = std::max(lo, 0.0);
  hi = std::min(hi, d - 1.0);
  std::vector<double> out;
  for (std::size_t i = 0; i < static_cast<std::size_t>(d / 2); ++i) {
    const double w = std::clamp((static_cast<double>(i) - lo) / (hi - lo), 0.0, 1.0);  // 0: keep, 1: theta / s
    const double theta = plain_theta(c.rope_theta, i, d);
    out.push_back(theta * (1 - w) + theta / sc.factor * w);
  }
  return out;
}

TEST(Ch02Yarn, truncate_rounds_the_ramp_ends_and_false_keeps_them_fractional) {
  RopeConfig c = scaled("yarn", 128, 1e4, 4, 4096, 16384);
  const RopeFrequencies rounded = ref::rope_frequencies(c);
  c.rope_scaling.truncate = false;
  const RopeFrequencies exact = ref::rope_frequencies(c);
  EXPECT_TRUE(same_frequencies(rounded.inv_freq, yarn_oracle(c, true), 1e-13)) << "truncate: true";
  EXPECT_TRUE(same_frequencies(exact.inv_freq, yarn_oracle(c, false), 1e-13)) << "truncate: false";
  // The correction dimensions here are fractional (about 20.9 and 45.4), so the two differ.
  double largest = 0;
  for (std::size_t i = 0; i < 64; ++i) largest = std::max(largest, std::fabs(exact.inv_freq(i) / rounded.inv_freq(i) - 1));
  EXPECT_GT(largest, 1e-3);
  EXPECT_EQ(exact.attention_factor, rounded.attention_factor);
}

// ------------------------------------------------------------------------------- partial rotation

TEST(Ch02PartialRotary, frequencies_use_the_rotary_dimension) {
  // Hugging Face: dim = int(head_dim * partial_rotary_factor), theta_i = base^(-2i/dim), dim/2 of them.
  RopeConfig c = scaled("default", 80, 1e4, 1, 2048, 2048);
  c.partial_rotary_factor = 0.4;  // Phi-2: head_dim 80, 32 rotated coordinates
  EXPECT_EQ(rotary_dim(c), 32);
  std::vector<double> want;
  for (std::size_t i = 0; i < 16; ++i) want.push_back(plain_theta(1e4, i, 32));
  EXPECT_TRUE(same_frequencies(ref::rope_frequencies(c).inv_freq, want, 1e-14));
  // YaRN measures its correction range in the rotary dimension too.
  RopeConfig y = scaled("yarn", 128, 1e4, 4, 4096, 16384);
  y.partial_rotary_factor = 0.5;
  RopeConfig same = scaled("yarn", 64, 1e4, 4, 4096, 16384);
  EXPECT_TRUE(same_frequencies(ref::rope_frequencies(y).inv_freq, yarn_oracle(same, true), 1e-13));
}

TEST(Ch02PartialRotary, rejects_factors_outside_zero_one_or_an_odd_rotary_dimension) {
  RopeConfig c = scaled("default", 64, 1e4, 1, 2048, 2048);
  for (double p : {0.0, -0.5, 1.5, std::nan("")}) {
    c.partial_rotary_factor = p;
    EXPECT_TRUE(throws_error_naming([&] { ref::rope_frequencies(c); }, {"partial_rotary_factor"})) << p;
  }
  c.partial_rotary_factor = 0.25 + 1.0 / 64;  // 64 p = 17: odd
  EXPECT_TRUE(throws_error_naming([&] { ref::rope_frequencies(c); }, {"partial_rotary_factor", "rotary_dim", "17"}));
  c.partial_rotary_factor = 0.01;  // 64 p = 0.64 -> 0
  EXPECT_TRUE(throws_error_naming([&] { ref::rope_frequencies(c); }, {"partial_rotary_factor", "rotary_dim"}));
}

class PartialRotation : public ::testing::TestWithParam<Backend> {};

// The rotation of x with d_r / 2 frequencies, in double: pairs (i, i + d_r/2) or (2i, 2i+1) inside
// the first d_r coordinates, the rest copied.
DTensor3 partial_rope_oracle(const Tensor3& x, const RopeFrequencies& f, RopeLayout layout, long long p0) {
  const std::size_t pairs = f.inv_freq.size();
  DTensor3 y = xt::cast<double>(x);
  for (std::size_t h = 0; h < x.shape()[0]; ++h)
    for (std::size_t t = 0; t < x.shape()[1]; ++t)
      for (std::size_t i = 0; i < pairs; ++i) {
        const std::size_t a = layout == RopeLayout::half_split ? i : 2 * i;
        const std::size_t b = layout == RopeLayout::half_split ? i + pairs : 2 * i + 1;
        const double angle = static_cast<double>(p0 + static_cast<long long>(t)) * f.inv_freq(i);
        const double xa = x(h, t, a), xb = x(h, t, b);
        y(h, t, a) = f.attention_factor * (xa * std::cos(angle) - xb * std::sin(angle));
        y(h, t, b) = f.attention_factor * (xa * std::sin(angle) + xb * std::cos(angle));
      }
  return y;
}

TEST_P(PartialRotation, rotates_the_first_rotary_dim_coordinates_and_copies_the_rest) {
  const Backend& impl = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  RopeConfig c = scaled("yarn", 24, 1e4, 4, 64, 256);
  c.partial_rotary_factor = 0.5;  // d_r = 12 of 24: pairs (i, i + 6) for i < 6, coordinates 12 .. 23 unchanged
  const RopeFrequencies f = ref::rope_frequencies(c);
  ASSERT_EQ(f.inv_freq.size(), 6u);
  Rng rng(5);
  const Tensor3 x = rng.normal_tensor(3, 17, 24);
  for (RopeLayout layout : {RopeLayout::half_split, RopeLayout::interleaved}) {
    const Tensor3 y = impl.apply_rope(x, f, layout, 40);
    const DTensor3 want = partial_rope_oracle(x, f, layout, 40);
    EXPECT_TRUE(tvlab::testing::matches(y, want, {1e-6, 1e-6},
                                        {"apply_rope, partial_rotary_factor 0.5", {"h", "t", "d"}, 5, "", ""}));
    for (std::size_t h = 0; h < 3; ++h)
      for (std::size_t t = 0; t < 17; ++t)
        for (std::size_t j = 12; j < 24; ++j)
          ASSERT_EQ(y(h, t, j), x(h, t, j)) << "coordinate " << j << " is past rotary_dim 12 and must pass through";
  }
}

TEST_P(PartialRotation, attention_uses_the_partially_rotated_q_and_k) {
  const Backend& impl = GetParam();
  if (!impl.rope_attention) GTEST_SKIP() << impl.name << " has no rope_attention";
  TVLAB_SKIP_WITHOUT_DEVICE(impl);
  RopeConfig c = scaled("default", 32, 1e4, 1, 64, 64);
  c.partial_rotary_factor = 0.25;  // d_r = 8
  const RopeFrequencies f = ref::rope_frequencies(c);
  Rng rng(6);
  const Tensor3 q = rng.normal_tensor(2, 5, 32), k = rng.normal_tensor(2, 9, 32), v = rng.normal_tensor(2, 9, 32);
  AttentionConfig cfg;
  cfg.mask.causal = true;
  const AttentionRope rope{f, RopeLayout::half_split, 3};
  // Queries at 3 + (9 - 5) + i, keys at 3 + j, rotated by the oracle, then the reference attention.
  const Tensor3 qr = xt::cast<float>(partial_rope_oracle(q, f, rope.layout, 7));
  const Tensor3 kr = xt::cast<float>(partial_rope_oracle(k, f, rope.layout, 3));
  const Tensor3 want = ref::scaled_dot_product_attention(qr, kr, v, cfg);
  EXPECT_TRUE(tvlab::testing::matches(impl.rope_attention(q, k, v, rope, cfg), xt::eval(xt::cast<double>(want)),
                                      {2e-5, 1e-5}, {"rope_attention, rotary_dim 8 of 32", {"h", "i", "d"}, 6, "", ""}));
}

INSTANTIATE_TEST_SUITE_P(Ch02, PartialRotation,
                         ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::apply_rope)),
                         tvlab::testing::ImplName());

// --------------------------------------------------------------------------------- config.json

class HfConfigFile : public ::testing::Test {
 protected:
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("tvlab_hf_config_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                               "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  void SetUp() override { std::filesystem::create_directories(dir); }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir / name).string();
    std::ofstream(path) << text;
    return path;
  }
};

TEST_F(HfConfigFile, reads_an_older_rope_scaling_block) {
  // A Llama 3.1 style config: head_dim from hidden_size / num_attention_heads.
  const std::string path = write("llama.json", R"({
    "hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}})");
  const HfRopeConfig r = read_hf_rope_config(path);
  EXPECT_EQ(r.config.head_dim, 128);
  EXPECT_EQ(r.config.rope_theta, 5e5);
  EXPECT_EQ(r.config.max_position_embeddings, 131072);
  EXPECT_EQ(r.config.rope_scaling.rope_type, "llama3");
  EXPECT_EQ(r.config.rope_scaling.factor, 8.0);
  EXPECT_EQ(r.config.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(r.config.rope_scaling.high_freq_factor, 4.0);
  EXPECT_TRUE(r.factor_given);
}

TEST_F(HfConfigFile, reads_a_newer_rope_parameters_block_and_derives_the_missing_factor) {
  // Phi-3 style longrope: original length at the top level (it wins), no factor (max / original),
  // the older "type" key, a partial rotary factor inside the block, rope_theta inside too.
  const std::string path = write("phi3.json", R"({
    "head_dim": 8, "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
    "rope_parameters": {"type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                        "original_max_position_embeddings": 2048,
                        "short_factor": [1.0, 1.5], "long_factor": [2.0, 3.0]}})");
  const HfRopeConfig r = read_hf_rope_config(path);
  EXPECT_EQ(r.config.rope_scaling.rope_type, "longrope");
  EXPECT_EQ(r.config.rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_EQ(r.config.rope_scaling.factor, 32.0);
  EXPECT_FALSE(r.factor_given);
  EXPECT_EQ(r.config.partial_rotary_factor, 0.5);
  EXPECT_EQ(r.config.rope_scaling.long_factor, (std::vector<double>{2.0, 3.0}));
  // No rope block at all, and a null one: plain RoPE; yarn without a factor: max / original.
  EXPECT_EQ(read_hf_rope_config(write("plain.json", R"({"head_dim": 64, "max_position_embeddings": 2048})"))
                .config.rope_scaling.rope_type,
            "default");
  EXPECT_EQ(read_hf_rope_config(write("null.json", R"({"head_dim": 64, "max_position_embeddings": 2048,
                                                      "rope_scaling": null})"))
                .config.rope_theta,
            10000.0);
  const HfRopeConfig y = read_hf_rope_config(write("yarn.json", R"({"head_dim": 64, "max_position_embeddings": 163840,
      "rope_scaling": {"type": "yarn", "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1,
                       "mscale": 1.0, "mscale_all_dim": 1.0, "truncate": false}})"));
  EXPECT_EQ(y.config.rope_scaling.factor, 40.0);
  EXPECT_FALSE(y.config.rope_scaling.truncate);
  EXPECT_EQ(*y.config.rope_scaling.mscale_all_dim, 1.0);
}

TEST_F(HfConfigFile, names_the_file_and_the_field_of_every_problem) {
  auto fails = [&](const std::string& name, const std::string& text, std::vector<std::string> needles) {
    const std::string path = write(name, text);
    needles.push_back(path);
    return throws_error_naming([&] { read_hf_rope_config(path); }, needles);
  };
  EXPECT_TRUE(throws_error_naming([&] { read_hf_rope_config((dir / "absent.json").string()); }, {"absent.json", "open"}));
  EXPECT_TRUE(fails("broken.json", R"({"head_dim": 64,)", {"not valid JSON"}));
  EXPECT_TRUE(fails("list.json", R"([1, 2])", {"object"}));
  EXPECT_TRUE(fails("nomax.json", R"({"head_dim": 64})", {"max_position_embeddings", "missing"}));
  EXPECT_TRUE(fails("nohead.json", R"({"max_position_embeddings": 64, "hidden_size": 512})",
                    {"num_attention_heads", "missing"}));
  EXPECT_TRUE(fails("split.json", R"({"max_position_embeddings": 64, "hidden_size": 500, "num_attention_heads": 3})",
                    {"hidden_size", "num_attention_heads"}));
  EXPECT_TRUE(fails("frac.json", R"({"max_position_embeddings": 64.5, "head_dim": 64})",
                    {"max_position_embeddings", "whole number"}));
  EXPECT_TRUE(fails("text.json", R"({"max_position_embeddings": 64, "head_dim": 64,
                                     "rope_scaling": {"rope_type": "linear", "factor": "4"}})",
                    {"rope_scaling.factor", "number"}));
  EXPECT_TRUE(fails("nofactor.json", R"({"max_position_embeddings": 64, "head_dim": 64,
                                         "rope_scaling": {"rope_type": "linear"}})",
                    {"rope_scaling.factor", "missing"}));
  EXPECT_TRUE(fails("block.json", R"({"max_position_embeddings": 64, "head_dim": 64, "rope_scaling": 4})",
                    {"rope_scaling", "object"}));
  EXPECT_TRUE(fails("layers.json", R"({"max_position_embeddings": 64, "head_dim": 64,
      "rope_parameters": {"full_attention": {"rope_type": "default"}}})",
                    {"rope_parameters.full_attention", "layer type"}));
  EXPECT_TRUE(fails("truncate.json", R"({"max_position_embeddings": 64, "head_dim": 64,
      "rope_scaling": {"rope_type": "yarn", "factor": 4, "truncate": "no"}})",
                    {"rope_scaling.truncate", "true or false"}));
  EXPECT_TRUE(fails("llama.json", R"({"max_position_embeddings": 64, "head_dim": 64,
      "rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1}})",
                    {"rope_scaling.high_freq_factor", "missing"}));
  EXPECT_TRUE(fails("short.json", R"({"max_position_embeddings": 64, "head_dim": 8,
      "rope_scaling": {"rope_type": "longrope", "short_factor": [1, "a"], "long_factor": [1, 2, 3, 4]}})",
                    {"rope_scaling.short_factor", "list of numbers"}));
  // Range checks of the assembled configuration name the field and the file.
  EXPECT_TRUE(fails("len.json", R"({"max_position_embeddings": 64, "head_dim": 8,
      "rope_scaling": {"rope_type": "longrope", "short_factor": [1, 1], "long_factor": [1, 2, 3, 4]}})",
                    {"short_factor", "rotary_dim / 2"}));
  EXPECT_TRUE(fails("theta.json", R"({"max_position_embeddings": 64, "head_dim": 8, "rope_theta": 0.5})",
                    {"rope_theta"}));
  EXPECT_TRUE(fails("type.json", R"({"max_position_embeddings": 64, "head_dim": 8,
      "rope_scaling": {"rope_type": "ntk", "factor": 2}})",
                    {"rope_type", "ntk"}));
}

}  // namespace
}  // namespace tvlab::ch02
