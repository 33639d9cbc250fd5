// Chapter 06, the delta-rule family (ref::delta_rule_recurrent and ref::delta_rule_chunked):
// every member against a long-double oracle written here from the papers' transition-matrix form;
// the identities that make the family one kernel; what the delta rule does that linear attention
// does not (exact retrieval, overwriting, forgetting, and instability with unnormalised keys);
// bad input names the parameter.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../common/testing.hpp"
#include "delta_rule_problem.hpp"
#include "tvlab/core/rng.hpp"
#include "tvlab/ref/delta_rule.hpp"
#include "tvlab/ref/linear_attention.hpp"

namespace tvlab::ref {
namespace {

using tvlab::ch06_testing::Gate;
using tvlab::ch06_testing::Problem;
using tvlab::ch06_testing::random_problem;
using tvlab::ch06_testing::relative_rms_error;
using tvlab::testing::throws_error_naming;

struct Expected {
  DTensor3 o, state;
};

// The oracle, in long double, in the papers' transition-matrix form (Gated DeltaNet eq. 10, KDA eq. 1,
// transposed to S in R^{d_k x d_v}): with M_t = (I - beta_t k_t k_t^T) diag(alpha_t) (or diag(alpha_t)
// alone without the delta rule),
//   S_t = M_t S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T (scale q_t),
// q and k divided by their norms first when cfg.l2_normalize_qk.
Expected oracle(const Problem& p) {
  using Real = long double;
  const std::size_t h = p.q.shape()[0], n = p.q.shape()[1], d_k = p.q.shape()[2], d_v = p.v.shape()[2];
  const Real scale = p.cfg.scale ? *p.cfg.scale : 1.0L / std::sqrt(static_cast<Real>(d_k));
  Expected out{xt::zeros<double>({h, n, d_v}), xt::zeros<double>({h, d_k, d_v})};
  for (std::size_t head = 0; head < h; ++head) {
    std::vector<std::vector<Real>> s(d_k, std::vector<Real>(d_v, 0.0L));
    if (p.s0.size() != 0)
      for (std::size_t a = 0; a < d_k; ++a)
        for (std::size_t e = 0; e < d_v; ++e) s[a][e] = p.s0(head, a, e);
    for (std::size_t t = 0; t < n; ++t) {
      std::vector<Real> q(d_k), k(d_k), alpha(d_k, 1.0L);
      Real q_norm = 0.0L, k_norm = 0.0L;
      for (std::size_t a = 0; a < d_k; ++a) {
        q[a] = p.q(head, t, a), k[a] = p.k(head, t, a);
        q_norm += q[a] * q[a], k_norm += k[a] * k[a];
        if (p.gate.scalar.size() != 0) alpha[a] = std::exp(static_cast<Real>(p.gate.scalar(head, t)));
        if (p.gate.per_channel.size() != 0) alpha[a] = std::exp(static_cast<Real>(p.gate.per_channel(head, t, a)));
      }
      for (std::size_t a = 0; a < d_k; ++a)
        if (p.cfg.l2_normalize_qk) q[a] /= std::sqrt(q_norm), k[a] /= std::sqrt(k_norm);
      const Real beta = p.beta(head, t);
      // M_t = (I - beta k k^T) diag(alpha), or diag(alpha)
      std::vector<std::vector<Real>> m(d_k, std::vector<Real>(d_k, 0.0L));
      for (std::size_t a = 0; a < d_k; ++a)
        for (std::size_t b = 0; b < d_k; ++b)
          m[a][b] = ((a == b ? 1.0L : 0.0L) - (p.cfg.delta ? beta * k[a] * k[b] : 0.0L)) * alpha[b];
      std::vector<std::vector<Real>> next(d_k, std::vector<Real>(d_v, 0.0L));
      for (std::size_t a = 0; a < d_k; ++a)
        for (std::size_t e = 0; e < d_v; ++e) {
          next[a][e] = beta * k[a] * p.v(head, t, e);
          for (std::size_t b = 0; b < d_k; ++b) next[a][e] += m[a][b] * s[b][e];
        }
      s = next;
      for (std::size_t e = 0; e < d_v; ++e) {
        Real o = 0.0L;
        for (std::size_t a = 0; a < d_k; ++a) o += s[a][e] * scale * q[a];
        out.o(head, t, e) = static_cast<double>(o);
      }
    }
    for (std::size_t a = 0; a < d_k; ++a)
      for (std::size_t e = 0; e < d_v; ++e) out.state(head, a, e) = static_cast<double>(s[a][e]);
  }
  return out;
}

// The reference accumulates in double and rounds each result once to float: a relative error of at
// most 2^-24 (6e-8) per element, so at most 6e-8 relative RMS; the double sums add about 1e-16 per
// operation, negligible. 1e-6 leaves a factor of 16 for that rounding, and every mistake in the
// algorithm (a missing beta, a decay applied after the prediction) moves the result by far more.
constexpr double kFloatRounding = 1e-6;

template <class A>
double max_abs_difference(const A& a, const A& b) {
  return static_cast<double>(xt::amax(xt::abs(a - b))());
}

// The six members of the family, and DeltaNet once more with keys left unnormalised but short
// enough (norm about 0.7 < sqrt(2)) to keep the delta rule stable.
struct Member {
  const char* name;
  Gate gate;
  bool delta;
  bool l2_normalize;
  double key_scale;
  std::optional<double> scale;
};
const Member kMembers[] = {
    {"linear attention", Gate::none, false, false, 1.0, std::nullopt},
    {"decayed linear attention (scalar gate)", Gate::scalar, false, false, 1.0, std::nullopt},
    {"GLA (per-channel gate)", Gate::per_channel, false, false, 1.0, 0.7},
    {"DeltaNet", Gate::none, true, true, 1.0, std::nullopt},
    {"DeltaNet, short unnormalised keys", Gate::none, true, false, 0.3, std::nullopt},
    {"Gated DeltaNet", Gate::scalar, true, true, 1.0, std::nullopt},
    {"KDA", Gate::per_channel, true, true, 1.0, 0.7},
};

Problem member_problem(const Member& member, unsigned long long seed) {
  // h = 2, T = 37 (a multiple of none of the chunk sizes), d_k = 5, d_v = 7, a non-zero S_0
  Problem p = random_problem(seed, 2, 37, 5, 7, member.gate, /*with_state=*/true);
  p.k *= static_cast<float>(member.key_scale);
  p.cfg.delta = member.delta;
  p.cfg.l2_normalize_qk = member.l2_normalize;
  p.cfg.scale = member.scale;
  return p;
}

TEST(Ch06DeltaRule, every_member_matches_the_oracle_recurrent_and_chunked) {
  unsigned long long seed = 600;
  for (const Member& member : kMembers) {
    SCOPED_TRACE(member.name);
    const Problem p = member_problem(member, ++seed);
    const Expected expected = oracle(p);
    const DeltaRuleOutput recurrent = delta_rule_recurrent(p.q, p.k, p.v, p.beta, p.gate, p.cfg, p.s0);
    EXPECT_LE(relative_rms_error(recurrent.o, expected.o), kFloatRounding) << "recurrent, o";
    EXPECT_LE(relative_rms_error(recurrent.state, expected.state), kFloatRounding) << "recurrent, state";
    for (std::size_t chunk : {1u, 3u, 16u, 37u, 42u}) {
      const DeltaRuleOutput chunked = delta_rule_chunked(p.q, p.k, p.v, p.beta, p.gate, p.cfg, chunk, p.s0);
      EXPECT_LE(relative_rms_error(chunked.o, expected.o), kFloatRounding) << "chunked, C = " << chunk << ", o";
      EXPECT_LE(relative_rms_error(chunked.state, expected.state), kFloatRounding)
          << "chunked, C = " << chunk << ", state";
    }
  }
}

// The family is one kernel: a scalar gate is the per-channel gate with one value in every channel,
// and a zero log gate (alpha = 1) is no gate. The reference computes these cases with the same
// products in the same order, so they agree exactly, not only to rounding.
TEST(Ch06DeltaRule, gated_deltanet_is_kda_with_its_gate_in_every_channel) {
  Problem gdn = random_problem(611, 2, 19, 4, 3, Gate::scalar, true);
  gdn.cfg.l2_normalize_qk = true;
  Problem kda = gdn;
  kda.gate.scalar = Tensor2::from_shape({0, 0});
  kda.gate.per_channel = xt::broadcast(xt::view(gdn.gate.scalar, xt::all(), xt::all(), xt::newaxis()), {2, 19, 4});
  const auto a = delta_rule_recurrent(gdn.q, gdn.k, gdn.v, gdn.beta, gdn.gate, gdn.cfg, gdn.s0);
  const auto b = delta_rule_recurrent(kda.q, kda.k, kda.v, kda.beta, kda.gate, kda.cfg, kda.s0);
  EXPECT_EQ(max_abs_difference(a.o, b.o), 0.0);
  EXPECT_EQ(max_abs_difference(a.state, b.state), 0.0);
  const auto c = delta_rule_chunked(gdn.q, gdn.k, gdn.v, gdn.beta, gdn.gate, gdn.cfg, 5, gdn.s0);
  const auto d = delta_rule_chunked(kda.q, kda.k, kda.v, kda.beta, kda.gate, kda.cfg, 5, kda.s0);
  EXPECT_EQ(max_abs_difference(c.o, d.o), 0.0);
  EXPECT_EQ(max_abs_difference(c.state, d.state), 0.0);
}

TEST(Ch06DeltaRule, deltanet_is_gated_deltanet_and_kda_with_zero_log_gates) {
  Problem deltanet = random_problem(612, 2, 19, 4, 3, Gate::none, true);
  deltanet.cfg.l2_normalize_qk = true;
  Problem gdn = deltanet, kda = deltanet;
  gdn.gate.scalar = xt::zeros<float>({2, 19});
  kda.gate.per_channel = xt::zeros<float>({2, 19, 4});
  for (std::size_t chunk : {0u, 6u}) {  // 0: the recurrence
    auto run = [&](const Problem& p) {
      return chunk == 0 ? delta_rule_recurrent(p.q, p.k, p.v, p.beta, p.gate, p.cfg, p.s0)
                        : delta_rule_chunked(p.q, p.k, p.v, p.beta, p.gate, p.cfg, chunk, p.s0);
    };
    const auto a = run(deltanet), b = run(gdn), c = run(kda);
    EXPECT_EQ(max_abs_difference(a.o, b.o), 0.0) << "chunk " << chunk;
    EXPECT_EQ(max_abs_difference(a.o, c.o), 0.0) << "chunk " << chunk;
    EXPECT_EQ(max_abs_difference(a.state, b.state), 0.0) << "chunk " << chunk;
    EXPECT_EQ(max_abs_difference(a.state, c.state), 0.0) << "chunk " << chunk;
  }
}

// Without the delta rule, beta = 1 and no gate, the recurrence is S_t = S_{t-1} + k_t v_t^T,
// o_t = S_t^T (scale q_t): chapter 06's causal linear attention, unnormalised, with the identity
// feature map. Two implementations of one sum, each rounded once to float (kFloatRounding).
TEST(Ch06DeltaRule, linear_attention_is_the_delta_rule_without_delta) {
  Problem p = random_problem(613, 3, 23, 6, 5, Gate::none, false);
  p.beta = xt::ones<float>({3, 23});
  p.cfg.delta = false;
  p.cfg.scale = 0.5;
  const DeltaRuleOutput family = delta_rule_recurrent(p.q, p.k, p.v, p.beta, p.gate, p.cfg);
  LinearAttentionConfig linear;
  linear.feature_map = FeatureMap::identity;
  linear.normalize = false;
  linear.scale = 0.5;
  LinearAttentionState state(3, 6, 5);
  const Tensor3 o = causal_linear_attention_recurrent(p.q, p.k, p.v, linear, state);
  EXPECT_LE(relative_rms_error(family.o, o), kFloatRounding);
  EXPECT_LE(relative_rms_error(family.state, state.s), kFloatRounding);
}

// Chunks of one position: no solve, no intra-chunk sum, the chunked form is the recurrence step by
// step (in a different order of double operations: the two differ by rounding only).
TEST(Ch06DeltaRule, chunks_of_one_position_are_the_recurrence) {
  Problem p = random_problem(614, 2, 29, 5, 6, Gate::per_channel, true);
  p.cfg.l2_normalize_qk = true;
  const auto recurrent = delta_rule_recurrent(p.q, p.k, p.v, p.beta, p.gate, p.cfg, p.s0);
  const auto chunked = delta_rule_chunked(p.q, p.k, p.v, p.beta, p.gate, p.cfg, 1, p.s0);
  EXPECT_LE(relative_rms_error(chunked.o, recurrent.o), kFloatRounding);
  EXPECT_LE(relative_rms_error(chunked.state, recurrent.state), kFloatRounding);
}

// A problem of hand-picked rows: q, k [1, n, d_k], v [1, n, d_v], beta [1, n].
Problem by_hand(const std::vector<std::vector<float>>& q, const std::vector<std::vector<float>>& k,
                const std::vector<std::vector<float>>& v, const std::vector<float>& beta) {
  const std::size_t n = q.size(), d_k = q[0].size(), d_v = v[0].size();
  Problem p;
  p.q = Tensor3::from_shape({1, n, d_k});
  p.k = Tensor3::from_shape({1, n, d_k});
  p.v = Tensor3::from_shape({1, n, d_v});
  p.beta = Tensor2::from_shape({1, n});
  for (std::size_t t = 0; t < n; ++t) {
    for (std::size_t c = 0; c < d_k; ++c) p.q(0, t, c) = q[t][c], p.k(0, t, c) = k[t][c];
    for (std::size_t e = 0; e < d_v; ++e) p.v(0, t, e) = v[t][e];
    p.beta(0, t) = beta[t];
  }
  p.cfg.scale = 1.0;
  return p;
}

// An associative memory: with orthonormal keys e_1..e_4 and beta = 1, S = sum_i e_i v_i^T, and a
// query e_i reads back v_i exactly. Steps 4-7 only read (beta = 0 writes nothing; their keys do
// not matter).
TEST(Ch06DeltaRule, orthonormal_keys_are_retrieved_exactly) {
  const std::vector<std::vector<float>> e = {{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}};
  const std::vector<std::vector<float>> values = {
      {0.5f, -2, 3, 1}, {7, 0.25f, -1, 2}, {-3, 4, 0.125f, -6}, {1, 1, -1, 9}};
  std::vector<std::vector<float>> q = e, k = e, v = values;
  for (std::size_t i = 0; i < 4; ++i) q.push_back(e[i]), k.push_back(e[(i + 1) % 4]), v.push_back({9, 9, 9, 9});
  const Problem p = by_hand(q, k, v, {1, 1, 1, 1, 0, 0, 0, 0});
  for (const auto& out : {delta_rule_recurrent(p.q, p.k, p.v, p.beta, p.gate, p.cfg),
                          delta_rule_chunked(p.q, p.k, p.v, p.beta, p.gate, p.cfg, 3)})
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t c = 0; c < 4; ++c) EXPECT_FLOAT_EQ(out.o(0, 4 + i, c), values[i][c]) << "key e_" << i + 1;
}

// The delta rule overwrites: writing (k, v1) then (k, v2) with beta = 1 and ||k|| = 1 predicts v1 at
// k, writes v2 - v1, and leaves S^T k = v2. Linear attention only adds: it returns v1 + v2.
TEST(Ch06DeltaRule, a_second_write_at_one_key_overwrites_where_linear_attention_adds) {
  const std::vector<float> key = {0.6f, 0.8f, 0, 0}, v1 = {1, -2, 3}, v2 = {4, 0.5f, -1};
  Problem p = by_hand({key, key}, {key, key}, {v1, v2}, {1, 1});
  p.cfg.l2_normalize_qk = true;  // ||k|| = 1 in double, whatever 0.6f and 0.8f round to
  for (bool delta : {true, false}) {
    p.cfg.delta = delta;
    for (const auto& out : {delta_rule_recurrent(p.q, p.k, p.v, p.beta, p.gate, p.cfg),
                            delta_rule_chunked(p.q, p.k, p.v, p.beta, p.gate, p.cfg, 2)})
      for (std::size_t e = 0; e < 3; ++e)
        EXPECT_NEAR(out.o(0, 1, e), delta ? v2[e] : v1[e] + v2[e], 1e-6) << (delta ? "delta rule" : "linear attention");
  }
}

// A forget gate alpha_t = e^{-10^4} = 0 at step t0 empties the state: from t0 on, the outputs and the
// final state are those of a fresh run that starts at t0. In the chunked form t0 falls inside a chunk;
// the gates enter as e^{G_i - G_j}, never as e^{G_i} e^{-G_j} = 0 * inf.
TEST(Ch06DeltaRule, a_gate_of_zero_forgets_everything_before) {
  const std::size_t n = 20, t0 = 9;
  for (Gate kind : {Gate::scalar, Gate::per_channel}) {
    Problem p = random_problem(615, 2, n, 4, 3, kind, true);
    p.cfg.l2_normalize_qk = true;
    if (kind == Gate::scalar) xt::view(p.gate.scalar, xt::all(), t0) = -1e4f;
    if (kind == Gate::per_channel) xt::view(p.gate.per_channel, xt::all(), t0, xt::all()) = -1e4f;
    Problem fresh = p;  // positions t0..n-1, from S = 0
    fresh.q = xt::view(p.q, xt::all(), xt::range(t0, n), xt::all());
    fresh.k = xt::view(p.k, xt::all(), xt::range(t0, n), xt::all());
    fresh.v = xt::view(p.v, xt::all(), xt::range(t0, n), xt::all());
    fresh.beta = xt::view(p.beta, xt::all(), xt::range(t0, n));
    if (kind == Gate::scalar) fresh.gate.scalar = xt::view(p.gate.scalar, xt::all(), xt::range(t0, n));
    if (kind == Gate::per_channel)
      fresh.gate.per_channel = xt::view(p.gate.per_channel, xt::all(), xt::range(t0, n), xt::all());
    fresh.s0 = Tensor3::from_shape({0, 0, 0});
    const auto expected = delta_rule_recurrent(fresh.q, fresh.k, fresh.v, fresh.beta, fresh.gate, fresh.cfg);
    for (const auto& out : {delta_rule_recurrent(p.q, p.k, p.v, p.beta, p.gate, p.cfg, p.s0),
                            delta_rule_chunked(p.q, p.k, p.v, p.beta, p.gate, p.cfg, 4, p.s0)}) {
      const Tensor3 tail = xt::view(out.o, xt::all(), xt::range(t0, n), xt::all());
      EXPECT_LE(relative_rms_error(tail, expected.o), kFloatRounding);
      EXPECT_LE(relative_rms_error(out.state, expected.state), kFloatRounding);
    }
  }
}

// The delta rule's update multiplies the state by I - beta k k^T, whose eigenvalue along k is
// 1 - beta ||k||^2: with beta = 1 and keys of norm 3 it is -8, and the state grows by up to 8 at
// every step until it leaves float's range (the reference says so, and how to fix it). With unit
// keys and beta in [0, 1] the update is a contraction plus a write,
//   ||S_t||_2^2 <= ||S_{t-1}||_2^2 + ||v_t||^2   (Cauchy-Schwarz on S_t^T x for a unit x),
// so every output is bounded: ||o_t|| <= scale * sqrt(sum_{s <= t} ||v_s||^2).
TEST(Ch06DeltaRule, unnormalised_keys_make_deltanet_diverge_normalised_ones_stay_bounded) {
  const std::size_t n = 300, d = 4;
  Problem p = random_problem(616, 1, n, d, d, Gate::none, false);
  p.beta = xt::ones<float>({std::size_t{1}, n});
  for (std::size_t t = 0; t < n; ++t) {  // k_t = 3 k_t / ||k_t||
    const float norm = std::sqrt(static_cast<float>(xt::sum(xt::square(xt::view(p.k, 0, t, xt::all())))()));
    xt::view(p.k, 0, t, xt::all()) *= 3.0f / norm;
  }
  const std::vector<std::string> why = {"grew beyond float's range", "sqrt(2/beta)", "cfg.l2_normalize_qk"};
  EXPECT_TRUE(throws_error_naming([&] { delta_rule_recurrent(p.q, p.k, p.v, p.beta, p.gate, p.cfg); }, why));
  EXPECT_TRUE(throws_error_naming([&] { delta_rule_chunked(p.q, p.k, p.v, p.beta, p.gate, p.cfg, 16); }, why));

  p.cfg.l2_normalize_qk = true;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (const auto& out : {delta_rule_recurrent(p.q, p.k, p.v, p.beta, p.gate, p.cfg),
                          delta_rule_chunked(p.q, p.k, p.v, p.beta, p.gate, p.cfg, 16)}) {
    double written = 0.0;  // sum_{s <= t} ||v_s||^2
    for (std::size_t t = 0; t < n; ++t) {
      written += static_cast<double>(xt::sum(xt::square(xt::view(p.v, 0, t, xt::all())))());
      const double norm_o = std::sqrt(static_cast<double>(xt::sum(xt::square(xt::view(out.o, 0, t, xt::all())))()));
      ASSERT_LE(norm_o, scale * std::sqrt(written) * (1.0 + 1e-6)) << "position " << t;
    }
  }
}

// A small valid problem for the error paths.
Problem valid_problem() { return random_problem(617, 2, 6, 3, 4, Gate::none, true); }

// Both functions reject `p`, naming the function and every needle.
void expect_both_reject(const Problem& p, const std::vector<std::string>& needles) {
  auto with = [&](const char* fn) {
    std::vector<std::string> all = needles;
    all.push_back(fn);
    return all;
  };
  EXPECT_TRUE(throws_error_naming([&] { delta_rule_recurrent(p.q, p.k, p.v, p.beta, p.gate, p.cfg, p.s0); },
                                  with("delta_rule_recurrent")));
  EXPECT_TRUE(throws_error_naming([&] { delta_rule_chunked(p.q, p.k, p.v, p.beta, p.gate, p.cfg, 4, p.s0); },
                                  with("delta_rule_chunked")));
}

TEST(Ch06DeltaRule, shapes_that_do_not_agree_name_the_parameter) {
  Problem p = valid_problem();
  p.q = Tensor3::from_shape({2, 0, 3});
  expect_both_reject(p, {"q must not be empty"});
  p = valid_problem();
  p.k = Tensor3::from_shape({2, 6, 2});
  expect_both_reject(p, {"k has d_k 2, expected 3"});
  p = valid_problem();
  p.k = Tensor3::from_shape({2, 5, 3});
  expect_both_reject(p, {"k has seq 5, expected 6"});
  p = valid_problem();
  p.v = Tensor3::from_shape({1, 6, 4});
  expect_both_reject(p, {"v has heads 1, expected 2"});
  p = valid_problem();
  p.beta = Tensor2::from_shape({2, 7});
  expect_both_reject(p, {"beta has seq 7, expected 6"});
  p = valid_problem();
  p.gate.scalar = xt::zeros<float>({2, 5});
  expect_both_reject(p, {"gate.scalar has seq 5, expected 6"});
  p = valid_problem();
  p.gate.per_channel = xt::zeros<float>({2, 6, 4});
  expect_both_reject(p, {"gate.per_channel has d_k 4, expected 3"});
  p = valid_problem();
  p.s0 = xt::zeros<float>({2, 3, 5});
  expect_both_reject(p, {"initial_state has d_v 5, expected 4"});
}

TEST(Ch06DeltaRule, values_out_of_range_name_the_parameter) {
  Problem p = valid_problem();
  p.beta(1, 2) = 1.5f;
  expect_both_reject(p, {"beta (1.5", "[0, 1]"});
  p = valid_problem();
  p.beta(0, 0) = -0.25f;
  expect_both_reject(p, {"beta (-0.25", "[0, 1]"});
  p = valid_problem();
  p.gate.scalar = xt::zeros<float>({2, 6});
  p.gate.scalar(1, 3) = 0.5f;
  expect_both_reject(p, {"gate.scalar (0.5", "must be <= 0"});
  p = valid_problem();
  p.gate.per_channel = xt::zeros<float>({2, 6, 3});
  p.gate.per_channel(0, 4, 2) = 1e-3f;
  expect_both_reject(p, {"gate.per_channel (0.001", "must be <= 0"});
  p = valid_problem();
  p.gate.scalar = xt::zeros<float>({2, 6});
  p.gate.per_channel = xt::zeros<float>({2, 6, 3});
  expect_both_reject(p, {"gate.scalar and gate.per_channel are both given"});
  p = valid_problem();
  p.cfg.scale = 0.0;
  expect_both_reject(p, {"cfg.scale (0)"});
  p = valid_problem();
  p.cfg.scale = std::nan("");
  expect_both_reject(p, {"cfg.scale (nan)"});
  p = valid_problem();
  EXPECT_TRUE(throws_error_naming([&] { delta_rule_chunked(p.q, p.k, p.v, p.beta, p.gate, p.cfg, 0, p.s0); },
                                  {"delta_rule_chunked", "chunk_size (0)"}));
}

TEST(Ch06DeltaRule, non_finite_input_and_zero_rows_name_the_parameter) {
  const float inf = INFINITY, nan = NAN;
  Problem p = valid_problem();
  p.q(0, 1, 2) = inf;
  expect_both_reject(p, {"q has a non-finite value"});
  p = valid_problem();
  p.k(1, 0, 0) = nan;
  expect_both_reject(p, {"k has a non-finite value"});
  p = valid_problem();
  p.v(1, 5, 3) = -inf;
  expect_both_reject(p, {"v has a non-finite value"});
  p = valid_problem();
  p.beta(0, 3) = nan;
  expect_both_reject(p, {"beta has a non-finite value"});
  p = valid_problem();
  p.gate.scalar = xt::zeros<float>({2, 6});
  p.gate.scalar(0, 0) = -inf;  // alpha = 0: a finite log gate of -1e4 forgets as well (e^{-1e4} is 0 in double)
  expect_both_reject(p, {"gate.scalar has a non-finite value"});
  p = valid_problem();
  p.s0(1, 2, 3) = nan;
  expect_both_reject(p, {"initial_state has a non-finite value"});
  // a zero row has no direction to normalise
  p = valid_problem();
  p.cfg.l2_normalize_qk = true;
  xt::view(p.q, 1, 4, xt::all()) = 0.0f;
  expect_both_reject(p, {"q has a zero row at head 1, position 4", "cfg.l2_normalize_qk"});
  p = valid_problem();
  p.cfg.l2_normalize_qk = true;
  xt::view(p.k, 0, 2, xt::all()) = 0.0f;
  expect_both_reject(p, {"k has a zero row at head 0, position 2", "cfg.l2_normalize_qk"});
}

}  // namespace
}  // namespace tvlab::ref
