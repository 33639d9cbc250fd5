// Chapter 06: what is particular to the optimized Performer (tvlab/opt/performer.hpp). Its float
// exponentials overflow past 88.7 where the reference's double ones reach 709.8, so inputs of large
// norm must go through its stabilised features (or to the reference) and never give inf or NaN;
// where a float normaliser would underflow, it must return the reference's answer; and every error
// must be the reference's, word for word.

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "../common/testing.hpp"
#include "performer_oracle.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/opt/performer.hpp"
#include "tvlab/ref/performer.hpp"

namespace tvlab {
namespace {

using ch06_testing::attention_input_scale;
using ch06_testing::exponent_magnitude;
using ch06_testing::performer_oracle;
using ch06_testing::performer_tolerance;
using tvlab::testing::matches;

PerformerFeatures hand_built(const std::vector<std::vector<double>>& rows) {
  PerformerFeatures features;
  features.w = DTensor2::from_shape({rows.size(), rows.front().size()});
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (std::size_t c = 0; c < rows[r].size(); ++c) features.w(r, c) = rows[r][c];
  return features;
}

// The message of the tvlab::Error `call` throws ("" when it throws none).
std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

tvlab::testing::Context context(const std::string& what, std::uint64_t seed) {
  return {what, {"h", "i", "e"}, seed, "tvlab linear --markdown",
          "a float exp(e) overflows past e = 88.7: the features must be shifted by the largest exponent of the head's "
          "keys and of each query before the exp"};
}

// W's rows six times longer (|omega| about 24) and q, k of standard deviation 3 (d = 16, |q^| about
// 6): exponents omega^T x^ - |x^|^2/2 from about -150 to above 100, beyond float's exp and within
// double's. Non-causal, every query sees every feature's largest key, so the stabilised float path
// gives the answer (not the reference's, bit for bit: no fallback), within the oracle's tolerance.
TEST(Ch06OptPerformer, large_norm_inputs_are_stabilised_not_overflowed) {
  const std::uint64_t seed = 681;
  Rng rng(seed);
  const std::size_t h = 2, n = 40, d = 16, d_v = 8, m = 48;
  const Tensor3 q = rng.normal_tensor(h, n, d, 0.0, 3.0), k = rng.normal_tensor(h, n, d, 0.0, 3.0);
  const Tensor3 v = rng.normal_tensor(h, n, d_v);
  PerformerFeatures features = ref::draw_performer_features(m, d, RandomFeatureKind::orthogonal, RowNorms::chi, seed);
  features.w *= 6.0;
  // the premise: some exponent beyond float's exp, none beyond double's
  double largest = -INFINITY;
  for (const Tensor3* x : {&q, &k})
    for (std::size_t head = 0; head < h; ++head)
      for (std::size_t i = 0; i < n; ++i) {
        const std::vector<double> row = ch06_testing::scaled_row(*x, head, i, attention_input_scale(d));
        double e0 = 0.0;
        for (double x_c : row) e0 -= 0.5 * x_c * x_c;
        for (std::size_t r = 0; r < m; ++r) {
          double e = e0;
          for (std::size_t c = 0; c < d; ++c) e += features.w(r, c) * row[c];
          largest = std::max(largest, e);
        }
      }
  ASSERT_GT(largest, 100.0);
  ASSERT_LT(largest, 700.0);
  const Tensor3 got = opt::performer_attention(q, k, v, features, false);
  EXPECT_TRUE(xt::all(xt::isfinite(got)));
  const DTensor3 expected = performer_oracle(q, k, v, features, false);
  EXPECT_TRUE(matches(got, expected, performer_tolerance(q, k, v, features),
                      context("performer_attention, large-norm inputs, non-causal", seed)));
  EXPECT_FALSE(xt::all(xt::equal(got, ref::performer_attention(q, k, v, features, false))))
      << "the stabilised float path should have computed this, not the reference";
  // causal, the first queries may see only keys far below the head's largest (float gives way to
  // the reference there): the answer is the oracle's either way
  const Tensor3 causal = opt::performer_attention(q, k, v, features, true);
  EXPECT_TRUE(xt::all(xt::isfinite(causal)));
  EXPECT_TRUE(matches(causal, performer_oracle(q, k, v, features, true), performer_tolerance(q, k, v, features),
                      context("performer_attention, large-norm inputs, causal", seed)));
}

// d = 2 (d^{-1/4} = 0.8409), W = [[10, 0], [0, 10]]. Key 0, k^ = (-20, 0), has exponents -400 and -200;
// key 1, k^ = (10, 0), has 50 and -50: the largest of each feature (over the one chunk), M = (50, -50).
// Shifted by M, key 0's features are e^-450 and e^-150: 0 in float. Causal, query 0 sees key 0
// alone, and its float normaliser is 0: the optimized version must return the reference's answer
// (row 0 = v_0), bit for bit.
TEST(Ch06OptPerformer, a_normaliser_lost_to_float_underflow_gives_the_reference_answer) {
  const auto unscale = [](double x) { return static_cast<float>(x / attention_input_scale(2)); };
  Tensor3 q = Tensor3::from_shape({1, 2, 2}), k = Tensor3::from_shape({1, 2, 2});
  q(0, 0, 0) = unscale(1.0), q(0, 0, 1) = 0.0f, q(0, 1, 0) = unscale(0.5), q(0, 1, 1) = unscale(0.5);
  k(0, 0, 0) = unscale(-20.0), k(0, 0, 1) = 0.0f, k(0, 1, 0) = unscale(10.0), k(0, 1, 1) = 0.0f;
  const Tensor3 v = {{{1.0f, -2.0f}, {3.0f, 4.0f}}};
  const PerformerFeatures features = hand_built({{10.0, 0.0}, {0.0, 10.0}});
  const Tensor3 expected = ref::performer_attention(q, k, v, features, true);
  const Tensor3 got = opt::performer_attention(q, k, v, features, true);
  for (std::size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(got.data()[i], expected.data()[i]) << "flat index " << i;
  EXPECT_FLOAT_EQ(got(0, 0, 0), 1.0f);
  EXPECT_FLOAT_EQ(got(0, 0, 1), -2.0f);
}

// Every error of the reference, word for word: the checks of the inputs, and the limits of its double
// arithmetic (an exponent beyond 709.8 names q or k; a normaliser below 1e-308 is named), which the
// optimized version reaches only through the reference; and where float cannot hold W, the
// reference's answer.
TEST(Ch06OptPerformer, errors_are_the_references_word_for_word) {
  Rng rng(691);
  const Tensor3 x = rng.normal_tensor(2, 3, 4), v = rng.normal_tensor(2, 3, 5);
  const PerformerFeatures features = ref::draw_performer_features(8, 4, RandomFeatureKind::iid, RowNorms::chi, 692);
  Tensor3 nan_x = x;
  nan_x(1, 1, 2) = std::nanf("");
  PerformerFeatures nan_w = features;
  nan_w.w(2, 3) = std::nan("");
  const auto unscale = [](double x) { return static_cast<float>(x / attention_input_scale(2)); };
  // omega = (40, 0), x^ = (40, 0): the exponent 1600 - 800 = 800, beyond double's 709.8
  const PerformerFeatures long_row = hand_built({{40.0, 0.0}});
  const Tensor3 far = {{{unscale(40.0), 0.0f}}}, near = {{{unscale(0.1), 0.0f}}}, one = {{{1.0f}}};
  // omega = (1, 0), q^ = k^ = (0, 30): each feature e^-450, their product e^-900, below double's 1e-308
  const PerformerFeatures short_row = hand_built({{1.0, 0.0}});
  const Tensor3 sideways = {{{0.0f, unscale(30.0)}}};
  struct Call {
    const char* what;
    std::function<Tensor3(decltype(&ref::performer_attention))> run;
  };
  const std::vector<Call> calls = {
      {"empty features", [&](auto f) { return f(x, x, v, PerformerFeatures{}, false); }},
      {"non-finite features", [&](auto f) { return f(x, x, v, nan_w, true); }},
      {"q of another d", [&](auto f) { return f(rng.normal_tensor(2, 3, 5), x, v, features, false); }},
      {"k of other heads", [&](auto f) { return f(x, rng.normal_tensor(1, 3, 4), v, features, false); }},
      {"v of another length", [&](auto f) { return f(x, x, rng.normal_tensor(2, 2, 5), features, false); }},
      {"causal, k of another length",
       [&](auto f) { return f(x, rng.normal_tensor(2, 5, 4), rng.normal_tensor(2, 5, 5), features, true); }},
      {"empty v", [&](auto f) { return f(x, x, Tensor3::from_shape({2, 3, 0}), features, false); }},
      {"NaN in k", [&](auto f) { return f(x, nan_x, v, features, false); }},
      {"NaN in q", [&](auto f) { return f(nan_x, x, v, features, true); }},
      {"k's exponent beyond double", [&](auto f) { return f(near, far, one, long_row, false); }},
      {"q's exponent beyond double", [&](auto f) { return f(far, near, one, long_row, true); }},
      {"a normaliser below double's smallest", [&](auto f) { return f(sideways, sideways, one, short_row, false); }},
  };
  for (const Call& call : calls) {
    const std::string expected = error_of([&] { call.run(&ref::performer_attention); });
    EXPECT_FALSE(expected.empty()) << call.what << ": the reference throws no error";
    EXPECT_EQ(error_of([&] { call.run(&opt::performer_attention); }), expected) << call.what;
  }
  // a row of W beyond float's range, valid in double (x = (0, 0.5): omega_1^T x = 0 there, and
  // inf * 0 = NaN in float): the reference's answer, not a NaN
  const PerformerFeatures huge = hand_built({{1e40, 0.0}, {0.0, 1.0}});
  const Tensor3 small = {{{0.0f, 0.5f}}};
  EXPECT_TRUE(xt::all(xt::equal(opt::performer_attention(small, small, one, huge, false),
                                ref::performer_attention(small, small, one, huge, false))));
  EXPECT_TRUE(xt::all(xt::equal(opt::performer_feature_map(small, huge), ref::performer_feature_map(small, huge))));
  // the feature map's: its checks, and a feature beyond float's range (omega = x = (20, 0): 200)
  const PerformerFeatures twenty = hand_built({{20.0, 0.0}});
  const Tensor3 big = {{{20.0f, 0.0f}}};
  using MapCall = std::function<Tensor3(decltype(&ref::performer_feature_map))>;
  for (const auto& [what, run] : std::vector<std::pair<const char*, MapCall>>{
           {"x of another d", [&](auto f) { return f(rng.normal_tensor(1, 2, 3), features); }},
           {"NaN in x", [&](auto f) { return f(nan_x, features); }},
           {"empty features", [&](auto f) { return f(x, PerformerFeatures{}); }},
           {"a feature beyond float", [&](auto f) { return f(big, twenty); }}}) {
    const std::string expected = error_of([&] { run(&ref::performer_feature_map); });
    EXPECT_FALSE(expected.empty()) << what << ": the reference throws no error";
    EXPECT_EQ(error_of([&] { run(&opt::performer_feature_map); }), expected) << what;
  }
}

// phi+(x)_r = exp(omega_r^T x - |x|^2/2) / sqrt(m) against the reference's, element by element: the
// float exponent carries reduction_rtol(d) E (E its sum of |terms|), the shift by ln sqrt(m) and the
// exp 2 ulps more (relative); a feature below float's smallest normal value, 1.2e-38, may be 0 here
// and a denormal there. Rows of lengths 0.5 to 12: exponents from about -70 to about +80, close to float's
// limit (88.7 + ln sqrt(m)), without reaching it; and rows of N(0, 0.09) entries.
TEST(Ch06OptPerformer, the_feature_map_matches_the_reference_to_floats_limit) {
  Rng rng(695);
  for (const std::size_t d : {std::size_t{3}, std::size_t{16}, std::size_t{64}}) {
    const std::size_t m = d == 64 ? 256 : 37;
    // every row of length 12.5 (sqrt(d) rescaled): exponents up to 12.5^2 / 2 = 78
    PerformerFeatures features = ref::draw_performer_features(m, d, RandomFeatureKind::orthogonal, RowNorms::sqrt_d, 696 + d);
    features.w *= 12.5 / std::sqrt(static_cast<double>(d));
    Tensor3 x = rng.normal_tensor(2, 50, d);
    for (std::size_t head = 0; head < 2; ++head)
      for (std::size_t i = 0; i < 50; ++i) {
        // row i along omega_(i mod m), of length 0.5 + i / 4: omega^T x - |x|^2/2 up to |omega|^2/2
        const double length = 0.5 + 0.25 * static_cast<double>(i);
        const double omega_norm = std::sqrt(xt::sum(xt::square(xt::row(features.w, i % m)))());
        for (std::size_t c = 0; c < d; ++c)
          x(head, i, c) = static_cast<float>(head == 0 ? length * features.w(i % m, c) / omega_norm : 0.3 * x(head, i, c));
      }
    const DTensor3 expected = xt::cast<double>(ref::performer_feature_map(x, features));
    const Tensor3 got = opt::performer_feature_map(x, features);
    const double rtol = reduction_rtol(d) * exponent_magnitude({&x}, 1.0, features) + 3.0 * FLT_EPSILON;
    EXPECT_TRUE(matches(got, expected, {FLT_MIN, rtol}, context("performer_feature_map, d = " + std::to_string(d), 695)));
    EXPECT_GT(xt::amax(expected)(), 1e20f) << "the premise: features far beyond 1 (exponents of tens)";
  }
  // within e^0.7 of float's largest value, beyond xsimd's exp (m = 1, omega = (20, 0), x = (t, 0):
  // 20 t - t^2/2 = 88.4 for t = 20 - sqrt(400 - 176.8)): the reference's answer, finite
  const PerformerFeatures one_row = hand_built({{20.0, 0.0}});
  const auto t = static_cast<float>(20.0 - std::sqrt(400.0 - 2.0 * 88.4));
  const Tensor3 edge = {{{t, 0.0f}}};
  const Tensor3 at_edge = opt::performer_feature_map(edge, one_row);
  EXPECT_TRUE(std::isfinite(at_edge(0, 0, 0)));
  EXPECT_EQ(at_edge(0, 0, 0), ref::performer_feature_map(edge, one_row)(0, 0, 0));
}

// A seeded sweep over the scales where float's limits bite: q and k of standard deviation 0.1 to
// 30 (each on its own), W's rows up to 6 times longer, v of 1 or 1000, causal or not, odd sizes.
// Exponents then run from tiny to beyond double's range, so each case lands on the stabilised float
// path, on the reference's answer, or on the reference's error. Whatever the path: the same error
// word for word when the reference throws, and otherwise a finite result within the double
// oracle's tolerance (performer_tolerance). Every path must be taken at least once.
TEST(Ch06OptPerformer, a_sweep_of_hostile_scales_never_leaves_the_references_contract) {
  const std::uint64_t seed = 697;
  Rng rng(seed);
  const auto pick = [&rng](std::size_t count) { return static_cast<std::size_t>(rng.uniform() * count); };
  const double input_std[] = {0.1, 1.0, 3.0, 6.0, 12.0, 30.0}, w_scale[] = {1.0, 3.0, 6.0};
  int float_path = 0, reference_answer = 0, reference_error = 0;
  for (int it = 0; it < 120; ++it) {
    const bool causal = pick(2) == 1;
    const std::size_t h = 1 + pick(3), n_q = 1 + pick(140), d = 1 + pick(20), d_v = 1 + pick(9), m = 1 + pick(80);
    const std::size_t n_k = causal ? n_q : 1 + pick(140);
    const Tensor3 q = rng.normal_tensor(h, n_q, d, 0.0, input_std[pick(6)]);
    const Tensor3 k = rng.normal_tensor(h, n_k, d, 0.0, input_std[pick(6)]);
    const Tensor3 v = rng.normal_tensor(h, n_k, d_v, 0.0, pick(2) == 1 ? 1e3 : 1.0);
    PerformerFeatures features = ref::draw_performer_features(
        m, d, pick(2) == 1 ? RandomFeatureKind::iid : RandomFeatureKind::orthogonal, RowNorms::chi, seed + it);
    features.w *= w_scale[pick(3)];
    const std::string what = "sweep case " + std::to_string(it) + (causal ? ", causal" : ", non-causal");
    const std::string expected_error = error_of([&] { ref::performer_attention(q, k, v, features, causal); });
    if (!expected_error.empty()) {
      ++reference_error;
      EXPECT_EQ(error_of([&] { opt::performer_attention(q, k, v, features, causal); }), expected_error) << what;
      continue;
    }
    const Tensor3 got = opt::performer_attention(q, k, v, features, causal);
    ASSERT_TRUE(xt::all(xt::isfinite(got))) << what << ": a non-finite output";
    if (xt::all(xt::equal(got, ref::performer_attention(q, k, v, features, causal))))
      ++reference_answer;  // (or a float result equal to it to the bit: rare, and harmless here)
    else
      ++float_path;
    EXPECT_TRUE(matches(got, performer_oracle(q, k, v, features, causal), performer_tolerance(q, k, v, features),
                        context("performer_attention, " + what, seed)));
  }
  EXPECT_GT(float_path, 0);
  EXPECT_GT(reference_answer, 0);
  EXPECT_GT(reference_error, 0);
}

}  // namespace
}  // namespace tvlab
