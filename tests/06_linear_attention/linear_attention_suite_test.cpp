// Chapter 06's linear-attention suites, run over every backend of its registry: the non-causal
// form and the causal form's three ways (recurrence, masked parallel, chunks) against a
// double-precision oracle written here from the definition; a state carried across pieces of a
// sequence (a prompt, then one token at a time) equals one pass; bad input names the parameter.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../common/registry.hpp"
#include "../common/testing.hpp"
#include "backends.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::linear {
namespace {

using tvlab::testing::matches;
using tvlab::testing::throws_error_naming;

// phi from its definition: elu(x) + 1 = x + 1 (x > 0) or e^x; max(0, x); x.
double phi(double x, FeatureMap map) {
  if (map == FeatureMap::relu) return x > 0.0 ? x : 0.0;
  if (map == FeatureMap::identity) return x;
  return x > 0.0 ? x + 1.0 : std::exp(x);
}

// o_i = sum_j a_ij v_j / sum_j a_ij (or the numerator), a_ij = scale phi(q_i) . phi(k_j), over
// j <= i when causal (q and k of one length), every j otherwise. In double.
DTensor3 oracle(const Tensor3& q, const Tensor3& k, const Tensor3& v, const LinearAttentionConfig& cfg, bool causal) {
  const std::size_t h = q.shape()[0], n_q = q.shape()[1], n_k = k.shape()[1], d = q.shape()[2], d_v = v.shape()[2];
  DTensor3 o = xt::zeros<double>({h, n_q, d_v});
  for (std::size_t head = 0; head < h; ++head)
    for (std::size_t i = 0; i < n_q; ++i) {
      double denominator = 0.0;
      for (std::size_t j = 0; j < (causal ? i + 1 : n_k); ++j) {
        double a = 0.0;
        for (std::size_t c = 0; c < d; ++c) a += cfg.scale * phi(q(head, i, c), cfg.feature_map) * phi(k(head, j, c), cfg.feature_map);
        denominator += a;
        for (std::size_t e = 0; e < d_v; ++e) o(head, i, e) += a * v(head, j, e);
      }
      if (cfg.normalize)
        for (std::size_t e = 0; e < d_v; ++e) o(head, i, e) /= denominator;
    }
  return o;
}

// Every backend computes in double or with float sums of at most n d products per output: the
// reference rounds once (relative 6e-8); an optimized float version's sums carry about
// reduction_rtol(n d) relative to their sum of |terms|, which the normalised outputs (weighted
// averages of N(0, 1) values) bound by max|v|: atol = reduction_rtol(n d) * max|oracle| + 1e-7.
Tolerance tolerance(const DTensor3& expected, std::size_t terms) {
  const double scale = std::max(1.0, static_cast<double>(xt::amax(xt::abs(expected))()));
  const double rtol = tvlab::testing::reduction_rtol(terms);
  return {rtol * scale + 1e-7, rtol};
}

struct Case {
  const char* label;
  FeatureMap map;
  bool normalize;
  std::size_t h, n, d, d_v;
};
void PrintTo(const Case& c, std::ostream* out) { *out << c.label; }

const Case kCases[] = {
    {"elu_plus_one_normalised_h2_n11_d4_dv5", FeatureMap::elu_plus_one, true, 2, 11, 4, 5},
    {"relu_normalised_h1_n9_d6_dv3", FeatureMap::relu, true, 1, 9, 6, 3},
    {"identity_unnormalised_h3_n13_d5_dv4", FeatureMap::identity, false, 3, 13, 5, 4},
    {"elu_plus_one_unnormalised_h2_n1_d3_dv2", FeatureMap::elu_plus_one, false, 2, 1, 3, 2},
    // widths past one SIMD register, and not a multiple of one
    {"elu_plus_one_normalised_h3_n70_d20_dv37", FeatureMap::elu_plus_one, true, 3, 70, 20, 37},
    {"identity_unnormalised_h2_n40_d33_dv80", FeatureMap::identity, false, 2, 40, 33, 80},
};

LinearAttentionConfig config_of(const Case& c) {
  LinearAttentionConfig cfg;
  cfg.feature_map = c.map;
  cfg.normalize = c.normalize;
  cfg.scale = 0.5;
  return cfg;
}

struct Inputs {
  Tensor3 q, k, v;
};
Inputs make_inputs(const Case& c, std::uint64_t seed) {
  Rng rng(seed);
  Inputs in{rng.normal_tensor(c.h, c.n, c.d), rng.normal_tensor(c.h, c.n, c.d), rng.normal_tensor(c.h, c.n, c.d_v)};
  // ReLU features: every query a positive first coordinate and every key too, so that no
  // normaliser is zero (a zero one is an error, tested below).
  if (c.map == FeatureMap::relu)
    for (std::size_t head = 0; head < c.h; ++head)
      for (std::size_t t = 0; t < c.n; ++t) {
        in.q(head, t, 0) = std::fabs(in.q(head, t, 0)) + 0.5f;
        in.k(head, t, 0) = std::fabs(in.k(head, t, 0)) + 0.5f;
      }
  return in;
}

tvlab::testing::Context context(const std::string& what, const Backend& b, std::uint64_t seed) {
  return {what + ", backend " + b.name,
          {"h", "i", "e"},
          seed,
          "tvlab linear --step --backend " + b.name,
          "$o_i = \\sum_j \\phi(q_i)^\\top \\phi(k_j)\\, v_j / \\sum_j \\phi(q_i)^\\top \\phi(k_j)$ over $j \\le i$ when causal; "
          "the usual mistakes: the state updated after the readout (position i must see itself), a chunk's "
          "inter-chunk part taken from the state after the chunk"};
}

class NonCausal : public ::testing::TestWithParam<std::tuple<Backend, Case>> {};

TEST_P(NonCausal, matches_the_double_oracle) {
  const auto& [backend, c] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  const std::uint64_t seed = 601 + c.n;
  const Inputs in = make_inputs(c, seed);
  // Queries over a longer set of keys: n_q = n, n_k = n + 3.
  Rng rng(seed + 1);
  Tensor3 k = xt::concatenate(xt::xtuple(in.k, rng.normal_tensor(c.h, 3, c.d)), 1);
  Tensor3 v = xt::concatenate(xt::xtuple(in.v, rng.normal_tensor(c.h, 3, c.d_v)), 1);
  if (c.map == FeatureMap::relu) xt::view(k, xt::all(), xt::range(c.n, c.n + 3), 0) = 1.0f;
  const LinearAttentionConfig cfg = config_of(c);
  const DTensor3 expected = oracle(in.q, k, v, cfg, /*causal=*/false);
  EXPECT_TRUE(matches(backend.linear_attention(in.q, k, v, cfg), expected, tolerance(expected, (c.n + 3) * c.d),
                      context(std::string("linear_attention, ") + c.label, backend, seed)));
}

// The exercise program's registry (the student's entry alone) has no non-causal form.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(NonCausal);
INSTANTIATE_TEST_SUITE_P(Ch06, NonCausal,
                         ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::linear_attention)),
                                            ::testing::ValuesIn(kCases)),
                         tvlab::testing::ImplCaseName());

class Causal : public ::testing::TestWithParam<std::tuple<Backend, Case>> {};

// The three forms, each against the oracle: the parallel form; the recurrence from an empty
// state; the chunked form with chunks of 1 (the recurrence), 3 (a ragged last chunk), n (the
// parallel form) and n + 4 (one chunk, longer than the sequence).
TEST_P(Causal, three_forms_match_the_double_oracle) {
  const auto& [backend, c] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  TVLAB_EXERCISE(backend, "06.1");
  const std::uint64_t seed = 611 + c.n;
  const Inputs in = make_inputs(c, seed);
  const LinearAttentionConfig cfg = config_of(c);
  const DTensor3 expected = oracle(in.q, in.k, in.v, cfg, /*causal=*/true);
  const Tolerance tol = tolerance(expected, c.n * c.d);
  if (backend.causal_parallel) {
    EXPECT_TRUE(matches(backend.causal_parallel(in.q, in.k, in.v, cfg), expected, tol,
                        context(std::string("causal_parallel, ") + c.label, backend, seed)));
  }
  if (backend.causal_recurrent) {
    LinearAttentionState state(c.h, c.d, c.d_v);
    EXPECT_TRUE(matches(backend.causal_recurrent(in.q, in.k, in.v, cfg, state), expected, tol,
                        context(std::string("causal_recurrent, ") + c.label, backend, seed)));
  }
  if (backend.causal_chunked)
    for (const std::size_t chunk : {std::size_t{1}, std::size_t{3}, c.n, c.n + 4}) {
      LinearAttentionState state(c.h, c.d, c.d_v);
      EXPECT_TRUE(matches(backend.causal_chunked(in.q, in.k, in.v, cfg, chunk, state), expected, tol,
                          context(std::string("causal_chunked, chunks of ") + std::to_string(chunk) + ", " + c.label,
                                  backend, seed)));
    }
}

// Rows [begin, end) of every head.
Tensor3 positions(const Tensor3& x, std::size_t begin, std::size_t end) {
  return xt::view(x, xt::all(), xt::range(begin, end), xt::all());
}

// A prompt of 4 tokens, then one token at a time (shorter sequences: what fits), each call given the state the previous one left:
// the outputs are the oracle's rows, and the state holds sum_j phi(k_j) v_j^T and sum_j phi(k_j).
TEST_P(Causal, a_carried_state_equals_one_pass) {
  const auto& [backend, c] = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  TVLAB_EXERCISE(backend, "06.1");
  const std::uint64_t seed = 621 + c.n;
  const Inputs in = make_inputs(c, seed);
  const LinearAttentionConfig cfg = config_of(c);
  const DTensor3 expected = oracle(in.q, in.k, in.v, cfg, /*causal=*/true);
  const Tolerance tol = tolerance(expected, c.n * c.d);
  using Step = std::function<Tensor3(const Tensor3&, const Tensor3&, const Tensor3&, LinearAttentionState&)>;
  std::vector<std::pair<std::string, Step>> forms;
  if (backend.causal_recurrent)
    forms.push_back({"causal_recurrent", [&](const Tensor3& q, const Tensor3& k, const Tensor3& v, LinearAttentionState& s) {
                       return backend.causal_recurrent(q, k, v, cfg, s);
                     }});
  if (backend.causal_chunked)
    forms.push_back({"causal_chunked", [&](const Tensor3& q, const Tensor3& k, const Tensor3& v, LinearAttentionState& s) {
                       return backend.causal_chunked(q, k, v, cfg, 3, s);
                     }});
  for (const auto& [name, step] : forms) {
    LinearAttentionState state(c.h, c.d, c.d_v);
    std::size_t begin = 0;
    // pieces [0, 4), [4, 5), [5, n - 1), [n - 1, n), each clipped to the sequence
    for (const std::size_t wanted : {std::size_t{4}, std::size_t{5}, c.n - 1, c.n}) {
      const std::size_t end = std::min(wanted, c.n);
      if (end <= begin) continue;
      const Tensor3 o = step(positions(in.q, begin, end), positions(in.k, begin, end), positions(in.v, begin, end), state);
      const DTensor3 rows = xt::view(expected, xt::all(), xt::range(begin, end), xt::all());
      EXPECT_TRUE(matches(o, rows, tol,
                          context(name + ", positions " + std::to_string(begin) + ".." + std::to_string(end - 1) +
                                      " after " + std::to_string(begin) + " carried in the state, " + c.label,
                                  backend, seed)));
      begin = end;
    }
    // z = sum_j phi(k_j) of head 0, channel 0, against its definition
    double z = 0.0;
    for (std::size_t t = 0; t < c.n; ++t) z += phi(in.k(0, t, 0), c.map);
    EXPECT_NEAR(state.z(0, 0), z, 1e-5 * std::max(1.0, std::fabs(z))) << name << ": state.z after the sequence";
  }
}

INSTANTIATE_TEST_SUITE_P(Ch06, Causal,
                         ::testing::Combine(::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::causal_recurrent)),
                                            ::testing::ValuesIn(kCases)),
                         tvlab::testing::ImplCaseName());

class Errors : public ::testing::TestWithParam<Backend> {};

TEST_P(Errors, bad_input_names_the_parameter_and_leaves_the_state) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  TVLAB_EXERCISE(backend, "06.1");
  Rng rng(631);
  const Tensor3 q = rng.normal_tensor(2, 5, 4), k = rng.normal_tensor(2, 5, 4), v = rng.normal_tensor(2, 5, 3);
  LinearAttentionConfig relu;
  relu.feature_map = FeatureMap::relu;
  // A query whose positive coordinates no key shares: its normaliser phi(q) . sum_j phi(k_j) is 0.
  Tensor3 q_apart = xt::zeros<float>({std::size_t{1}, std::size_t{1}, std::size_t{2}});
  Tensor3 k_apart = xt::zeros<float>({std::size_t{1}, std::size_t{1}, std::size_t{2}});
  q_apart(0, 0, 0) = 1.0f;
  k_apart(0, 0, 1) = 1.0f;
  const Tensor3 v_one = xt::ones<float>({std::size_t{1}, std::size_t{1}, std::size_t{1}});
  if (backend.linear_attention) {
    EXPECT_TRUE(throws_error_naming([&] { backend.linear_attention(q_apart, k_apart, v_one, relu); },
                                    {"linear_attention", "cfg.feature_map", "relu"}));
    EXPECT_TRUE(throws_error_naming([&] { backend.linear_attention(q, rng.normal_tensor(2, 5, 3), v, {}); },
                                    {"linear_attention", "k", "d_k"}));
    Tensor3 nan_v = v;
    nan_v(1, 2, 0) = std::nanf("");
    EXPECT_TRUE(throws_error_naming([&] { backend.linear_attention(q, k, nan_v, {}); }, {"linear_attention", "v", "non-finite"}));
  }
  if (backend.causal_parallel) {
    EXPECT_TRUE(throws_error_naming([&] { backend.causal_parallel(q, rng.normal_tensor(2, 6, 4), rng.normal_tensor(2, 6, 3), {}); },
                                    {"causal_linear_attention_parallel", "k", "seq"}));
  }
  if (backend.causal_chunked) {
    LinearAttentionState state(2, 4, 3);
    backend.causal_chunked(q, k, v, {}, 2, state);
    const LinearAttentionState before = state;
    EXPECT_TRUE(throws_error_naming([&] { backend.causal_chunked(q, k, v, {}, 0, state); },
                                    {"causal_linear_attention_chunked", "chunk_size"}));
    LinearAttentionState wrong(2, 4, 5);
    EXPECT_TRUE(throws_error_naming([&] { backend.causal_chunked(q, k, v, {}, 2, wrong); },
                                    {"causal_linear_attention_chunked", "state.s", "d_v"}));
    LinearAttentionConfig bad_scale;
    bad_scale.scale = 0.0;
    EXPECT_TRUE(throws_error_naming([&] { backend.causal_chunked(q, k, v, bad_scale, 2, state); },
                                    {"causal_linear_attention_chunked", "cfg.scale"}));
    EXPECT_TRUE(state.s == before.s && state.z == before.z) << "a call that throws must leave the state as it was";
  }
  if (backend.causal_recurrent) {
    LinearAttentionState state(1, 2, 1);
    backend.causal_recurrent(k_apart, k_apart, v_one, relu, state);  // z = [0, 1]
    const LinearAttentionState before = state;
    // the query's only positive coordinate is 0, where z is still 0 after this token's key (also [0, 1])
    EXPECT_TRUE(throws_error_naming([&] { backend.causal_recurrent(q_apart, k_apart, v_one, relu, state); },
                                    {"causal_linear_attention_recurrent", "cfg.feature_map"}));
    EXPECT_TRUE(state.s == before.s && state.z == before.z) << "a call that throws must leave the state as it was";
  }
}

// A state holding NaN or infinity is named, whichever the call's length and normalisation.
TEST_P(Errors, a_non_finite_state_is_named) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  TVLAB_EXERCISE(backend, "06.1");
  Rng rng(632);
  for (const std::size_t n : {std::size_t{1}, std::size_t{4}})
    for (const bool normalize : {true, false}) {
      const Tensor3 q = rng.normal_tensor(2, n, 4), k = rng.normal_tensor(2, n, 4), v = rng.normal_tensor(2, n, 3);
      LinearAttentionConfig cfg;
      cfg.normalize = normalize;
      LinearAttentionState with_nan(2, 4, 3), with_inf(2, 4, 3);
      with_nan.s(1, 2, 1) = std::nanf("");
      with_inf.z(1, 0) = std::numeric_limits<float>::infinity();
      EXPECT_TRUE(throws_error_naming([&] { backend.causal_recurrent(q, k, v, cfg, with_nan); },
                                      {"causal_linear_attention_recurrent", "state.s", "non-finite"}));
      EXPECT_TRUE(throws_error_naming([&] { backend.causal_recurrent(q, k, v, cfg, with_inf); },
                                      {"causal_linear_attention_recurrent", "state.z", "non-finite"}));
    }
}

// Outputs beyond float's range (q, k of 1e20, the identity map unnormalised: scores of 4e40) are
// errors, and leave the state as it was.
TEST_P(Errors, outputs_beyond_float_are_named) {
  const Backend& backend = GetParam();
  TVLAB_SKIP_WITHOUT_DEVICE(backend);
  TVLAB_EXERCISE(backend, "06.1");
  Rng rng(633);
  for (const std::size_t n : {std::size_t{1}, std::size_t{5}}) {
    Tensor3 q = rng.normal_tensor(2, n, 4), k = rng.normal_tensor(2, n, 4);
    const Tensor3 v = rng.normal_tensor(2, n, 3);
    q.fill(1e20f);
    k.fill(1e20f);
    LinearAttentionConfig cfg;
    cfg.feature_map = FeatureMap::identity;
    cfg.normalize = false;
    if (backend.linear_attention) {
      EXPECT_TRUE(throws_error_naming([&] { backend.linear_attention(q, k, v, cfg); }, {"linear_attention", "beyond float"}));
    }
    if (backend.causal_parallel) {
      EXPECT_TRUE(throws_error_naming([&] { backend.causal_parallel(q, k, v, cfg); },
                                      {"causal_linear_attention_parallel", "beyond float"}));
    }
    LinearAttentionState recurrent(2, 4, 3), chunked(2, 4, 3);
    EXPECT_TRUE(throws_error_naming([&] { backend.causal_recurrent(q, k, v, cfg, recurrent); },
                                    {"causal_linear_attention_recurrent", "beyond float"}));
    if (backend.causal_chunked) {
      EXPECT_TRUE(throws_error_naming([&] { backend.causal_chunked(q, k, v, cfg, 2, chunked); },
                                      {"causal_linear_attention_chunked", "beyond float"}));
    }
    EXPECT_TRUE(xt::all(xt::equal(recurrent.s, 0.0f)) && xt::all(xt::equal(chunked.s, 0.0f)))
        << "a call that throws must leave the state as it was";
  }
}

INSTANTIATE_TEST_SUITE_P(Ch06, Errors, ::testing::ValuesIn(tvlab::testing::under_test(backends(), &Backend::causal_recurrent)),
                         tvlab::testing::ImplName());

}  // namespace
}  // namespace tvlab::linear
