// Chapter 06's Performer attention (FAVOR+) over every backend of its registry that provides it:
// non-causal and causal, against the double-precision oracle of performer_oracle.hpp with the same
// random features W (drawn once per case from a fixed seed by ref::draw_performer_features, which
// every backend shares); odd sizes (n = 1, m = 1, lengths that are not multiples of a SIMD register,
// of the optimized causal form's chunk of 64 or of its non-causal blocks of 64 keys and 256
// queries), more keys than queries and more queries than keys; bad input names the parameter.

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "performer_oracle.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/performer.hpp"

namespace tvlab::linear {
namespace {

using tvlab::ch06_testing::performer_oracle;
using tvlab::ch06_testing::performer_tolerance;
using tvlab::testing::matches;
using tvlab::testing::throws_error_naming;

struct Case {
  const char* label;
  std::size_t h, n_q, n_k, d, d_v, m;
  RandomFeatureKind kind;
  bool causal;
  double input_std;  // q and k ~ N(0, input_std^2)
};
void PrintTo(const Case& c, std::ostream* out) { *out << c.label; }

const Case kCases[] = {
    {"iid_h2_nq9_nk13_d4_dv5_m16", 2, 9, 13, 4, 5, 16, RandomFeatureKind::iid, false, 1.0},
    {"causal_orthogonal_h3_n17_d8_dv3_m37", 3, 17, 17, 8, 3, 37, RandomFeatureKind::orthogonal, true, 1.0},
    {"one_position_one_feature_h2_n1_d3_dv2_m1", 2, 1, 1, 3, 2, 1, RandomFeatureKind::iid, false, 1.0},
    {"causal_one_position_h1_n1_d5_dv4_m9", 1, 1, 1, 5, 4, 9, RandomFeatureKind::iid, true, 1.0},
    // past two chunks of 64, none of them full; m and d_v past a SIMD register, not a multiple of one
    {"causal_orthogonal_h2_n150_d16_dv33_m70", 2, 150, 150, 16, 33, 70, RandomFeatureKind::orthogonal, true, 1.0},
    {"orthogonal_h2_nq70_nk130_d64_dv64_m256", 2, 70, 130, 64, 64, 256, RandomFeatureKind::orthogonal, false, 1.0},
    // queries past one block of 256 of the optimized non-causal form, the last one ragged
    {"iid_h1_nq300_nk70_d8_dv5_m20", 1, 300, 70, 8, 5, 20, RandomFeatureKind::iid, false, 1.0},
    // q and k of standard deviation 3: exponents of tens, features over many orders of magnitude
    {"causal_wide_inputs_h2_n90_d16_dv8_m64", 2, 90, 90, 16, 8, 64, RandomFeatureKind::iid, true, 3.0},
};

struct Inputs {
  Tensor3 q, k, v;
  PerformerFeatures features;
};
Inputs make_inputs(const Case& c, std::uint64_t seed) {
  Rng rng(seed);
  Inputs in{rng.normal_tensor(c.h, c.n_q, c.d, 0.0, c.input_std), rng.normal_tensor(c.h, c.n_k, c.d, 0.0, c.input_std),
            rng.normal_tensor(c.h, c.n_k, c.d_v), {}};
  in.features = ref::draw_performer_features(c.m, c.d, c.kind, RowNorms::chi, seed + 1);
  return in;
}

class Performer : public ::testing::TestWithParam<std::tuple<Backend, Case>> {};

TEST_P(Performer, matches_the_double_oracle) {
  const auto& [backend, c] = GetParam();
  const std::uint64_t seed = 660 + c.n_q + c.m;
  const Inputs in = make_inputs(c, seed);
  const DTensor3 expected = performer_oracle(in.q, in.k, in.v, in.features, c.causal);
  const tvlab::testing::Context context{
      std::string("performer_attention, ") + c.label + ", backend " + backend.name,
      {"h", "i", "e"},
      seed,
      "tvlab linear --markdown",
      "$o_i = \\sum_j \\phi^+(\\hat q_i)^\\top \\phi^+(\\hat k_j)\\, v_j / \\sum_j \\phi^+(\\hat q_i)^\\top \\phi^+(\\hat k_j)$, "
      "$\\hat x = d^{-1/4} x$, over $j \\le i$ when causal; the usual mistakes: a stabilising shift that differs "
      "between the keys of one query (it no longer cancels), the 1/4 power forgotten, a chunk reading the state "
      "after its own keys"};
  EXPECT_TRUE(matches(backend.performer(in.q, in.k, in.v, in.features, c.causal), expected,
                      performer_tolerance(in.q, in.k, in.v, in.features), context));
}

// The exercise program's registry (the student's entry alone) has no Performer.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Performer);
INSTANTIATE_TEST_SUITE_P(Ch06, Performer,
                         ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::performer)),
                                            ::testing::ValuesIn(kCases)),
                         tvlab::testing::ImplCaseName());

class PerformerErrors : public ::testing::TestWithParam<Backend> {};

TEST_P(PerformerErrors, bad_input_names_the_parameter) {
  const Backend& b = GetParam();
  Rng rng(671);
  const Tensor3 x = rng.normal_tensor(2, 3, 4), v = rng.normal_tensor(2, 3, 5);
  const PerformerFeatures features = ref::draw_performer_features(8, 4, RandomFeatureKind::iid, RowNorms::chi, 672);
  EXPECT_TRUE(throws_error_naming([&] { b.performer(x, x, v, PerformerFeatures{}, false); },
                                  {"performer_attention", "features.w", "empty"}));
  EXPECT_TRUE(throws_error_naming([&] { b.performer(rng.normal_tensor(2, 3, 6), x, v, features, false); },
                                  {"performer_attention", "q", "d 6, expected 4"}));
  EXPECT_TRUE(throws_error_naming([&] { b.performer(x, rng.normal_tensor(3, 3, 4), v, features, false); },
                                  {"performer_attention", "k", "heads 3, expected 2"}));
  EXPECT_TRUE(throws_error_naming([&] { b.performer(x, x, rng.normal_tensor(2, 4, 5), features, false); },
                                  {"performer_attention", "v", "seq 4, expected 3"}));
  EXPECT_TRUE(throws_error_naming(
      [&] { b.performer(rng.normal_tensor(2, 2, 4), x, v, features, true); }, {"performer_attention", "k", "seq"}));
  EXPECT_TRUE(throws_error_naming([&] { b.performer(Tensor3::from_shape({2, 0, 4}), x, v, features, false); },
                                  {"performer_attention", "q", "empty"}));
  Tensor3 nan_v = v;
  nan_v(1, 2, 4) = std::nanf("");
  EXPECT_TRUE(throws_error_naming([&] { b.performer(x, x, nan_v, features, false); },
                                  {"performer_attention", "v", "non-finite"}));
  PerformerFeatures inf_w = features;
  inf_w.w(7, 0) = INFINITY;
  EXPECT_TRUE(throws_error_naming([&] { b.performer(x, x, v, inf_w, true); },
                                  {"performer_attention", "features.w", "non-finite"}));
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PerformerErrors);
INSTANTIATE_TEST_SUITE_P(Ch06, PerformerErrors,
                         ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::performer)),
                         tvlab::testing::ImplName());

}  // namespace
}  // namespace tvlab::linear
