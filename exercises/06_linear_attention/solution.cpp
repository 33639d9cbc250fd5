// Chapter 06 exercises: worked solutions. Each marked region is what a student writes;
// scripts/make_student.py turns this file into student.cpp with the regions replaced by
// NotImplemented stubs. Edit this file, then regenerate (`make student-stubs`).

#include <algorithm>
#include <cmath>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/student/delta_rule.hpp"
#include "tvlab/student/linear_attention.hpp"

namespace tvlab::student {

Tensor3 causal_linear_attention_recurrent(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                          const LinearAttentionConfig& cfg, LinearAttentionState& state) {
  // BEGIN EXERCISE 06.1 "causal linear attention: the recurrence S_t = S_{t-1} + phi(k_t) v_t^T with its normaliser z_t" "Causal linear attention, three ways"
  const char* fn = "causal_linear_attention_recurrent";
  ref::validate_linear_attention_inputs(fn, q, k, v, cfg, /*same_length=*/true);
  ref::validate_linear_attention_state(fn, state, q, v);
  const std::size_t h = q.shape()[0], n = q.shape()[1], m = q.shape()[2], d_v = v.shape()[2];
  // phi of one number: elu(x) + 1, max(0, x) or x
  const auto phi = [&](double x) {
    switch (cfg.feature_map) {
      case FeatureMap::elu_plus_one: return x > 0.0 ? x + 1.0 : std::exp(x);
      case FeatureMap::relu: return std::max(x, 0.0);
      case FeatureMap::identity: break;
    }
    return x;
  };
  Tensor3 o = Tensor3::from_shape({h, n, d_v});
  LinearAttentionState next = state;  // written back only when every position succeeded
  for (std::size_t head = 0; head < h; ++head) {
    std::vector<double> s(m * d_v), z(m);
    for (std::size_t c = 0; c < m; ++c) {
      z[c] = state.z(head, c);
      for (std::size_t e = 0; e < d_v; ++e) s[c * d_v + e] = state.s(head, c, e);
    }
    for (std::size_t t = 0; t < n; ++t) {
      // S_t = S_{t-1} + phi(k_t) v_t^T and z_t = z_{t-1} + phi(k_t): the update comes first, so
      // position t sees itself
      for (std::size_t c = 0; c < m; ++c) {
        const double phi_k = phi(k(head, t, c));
        z[c] += phi_k;
        for (std::size_t e = 0; e < d_v; ++e) s[c * d_v + e] += phi_k * v(head, t, e);
      }
      // o_t = scale phi(q_t)^T S_t / (scale phi(q_t)^T z_t)
      std::vector<double> numerator(d_v, 0.0);
      double denominator = 0.0;
      for (std::size_t c = 0; c < m; ++c) {
        const double phi_q = cfg.scale * phi(q(head, t, c));
        denominator += phi_q * z[c];
        for (std::size_t e = 0; e < d_v; ++e) numerator[e] += phi_q * s[c * d_v + e];
      }
      if (cfg.normalize)
        require(denominator != 0.0, fn, "the normaliser phi(q_t) . z_t of head ", head, ", position ", t,
                " is 0: cfg.feature_map (", to_string(cfg.feature_map), ") gives the query no positive weight");
      for (std::size_t e = 0; e < d_v; ++e) {
        const double value = cfg.normalize ? numerator[e] / denominator : numerator[e];
        require(std::isfinite(value) && std::fabs(value) <= 3.4e38, fn, "the output of head ", head, ", position ", t,
                " is beyond float's range: scale q, k or v down");
        o(head, t, e) = static_cast<float>(value);
      }
    }
    for (std::size_t c = 0; c < m; ++c) {
      next.z(head, c) = static_cast<float>(z[c]);
      for (std::size_t e = 0; e < d_v; ++e) next.s(head, c, e) = static_cast<float>(s[c * d_v + e]);
    }
  }
  state = next;
  return o;
  // END EXERCISE
}

Tensor1 gated_delta_rule_step(Tensor2& state, const Tensor1& q, const Tensor1& k, const Tensor1& v, double beta,
                              const Tensor1& log_gate, double scale) {
  // BEGIN EXERCISE 06.2 "one token of the gated delta rule: decay, predict with the decayed state, write, read" "The delta-rule family: one recurrence"
  const char* fn = "gated_delta_rule_step";
  require(state.dimension() == 2 && state.size() > 0, fn, "state must be a non-empty [d_k, d_v] matrix");
  const std::size_t d_k = state.shape()[0], d_v = state.shape()[1];
  require_dim(fn, "q", q, 0, "length", d_k, "the rows d_k of state");
  require_dim(fn, "k", k, 0, "length", d_k, "the rows d_k of state");
  require_dim(fn, "v", v, 0, "length", d_v, "the columns d_v of state");
  require_dim(fn, "log_gate", log_gate, 0, "length", d_k, "the rows d_k of state");
  require_finite(fn, "state", state);
  require_finite(fn, "q", q);
  require_finite(fn, "k", k);
  require_finite(fn, "v", v);
  require_finite(fn, "log_gate", log_gate);
  require(beta >= 0.0 && beta <= 1.0, fn, "beta (", beta, ") must be in [0, 1]");
  require(std::isfinite(scale) && scale > 0.0, fn, "scale (", scale, ") must be positive and finite");
  for (std::size_t i = 0; i < d_k; ++i)
    require(log_gate(i) <= 0.0f, fn, "log_gate (", log_gate(i), " at ", i, ") must be <= 0: a gate e^g above 1 would grow the state");
  // decay: S~ = diag(e^g) S, row i scaled by alpha_i = e^{g_i}
  std::vector<double> s(d_k * d_v);
  for (std::size_t i = 0; i < d_k; ++i)
    for (std::size_t e = 0; e < d_v; ++e) s[i * d_v + e] = std::exp(static_cast<double>(log_gate(i))) * state(i, e);
  // predict and correct: u = beta (v - S~^T k)
  std::vector<double> u(d_v);
  for (std::size_t e = 0; e < d_v; ++e) {
    double prediction = 0.0;
    for (std::size_t i = 0; i < d_k; ++i) prediction += s[i * d_v + e] * k(i);
    u[e] = beta * (v(e) - prediction);
  }
  // write: S = S~ + k u^T
  for (std::size_t i = 0; i < d_k; ++i)
    for (std::size_t e = 0; e < d_v; ++e) s[i * d_v + e] += static_cast<double>(k(i)) * u[e];
  // read: o = S^T (scale q)
  Tensor1 o = Tensor1::from_shape({d_v});
  for (std::size_t e = 0; e < d_v; ++e) {
    double sum = 0.0;
    for (std::size_t i = 0; i < d_k; ++i) sum += s[i * d_v + e] * scale * q(i);
    require(std::isfinite(sum) && std::fabs(sum) <= 3.4e38, fn, "the output is beyond float's range: the state diverged "
            "(keys of norm above sqrt(2 / beta) make the delta rule unstable)");
    o(e) = static_cast<float>(sum);
  }
  for (const double x : s)
    require(std::fabs(x) <= 3.4e38, fn, "the state is beyond float's range: the state diverged "
            "(keys of norm above sqrt(2 / beta) make the delta rule unstable)");
  for (std::size_t i = 0; i < d_k; ++i)
    for (std::size_t e = 0; e < d_v; ++e) state(i, e) = static_cast<float>(s[i * d_v + e]);
  return o;
  // END EXERCISE
}

Tensor2 ut_transform_solve(const Tensor2& a, const Tensor1& beta, const Tensor2& w) {
  // BEGIN EXERCISE 06.3 "the UT transform: the unit lower-triangular solve inside a chunk of the delta rule" "Chunks: the WY form and the UT transform"
  const char* fn = "ut_transform_solve";
  require(a.size() > 0 && a.shape()[0] == a.shape()[1], fn, "a must be a non-empty square [C, C] matrix");
  const std::size_t c = a.shape()[0], d_v = w.shape()[1];
  require_dim(fn, "beta", beta, 0, "length", c, "the C of a");
  require_dim(fn, "w", w, 0, "rows", c, "the C of a");
  require_finite(fn, "a", a);
  require_finite(fn, "w", w);
  for (std::size_t i = 0; i < c; ++i)
    require(beta(i) >= 0.0f && beta(i) <= 1.0f, fn, "beta (", beta(i), " at ", i, ") must be in [0, 1]");
  // u_i = beta_i (w_i - sum_{j < i} A_ij u_j): row i uses only the rows already solved
  std::vector<double> u(c * d_v);
  for (std::size_t i = 0; i < c; ++i)
    for (std::size_t e = 0; e < d_v; ++e) {
      double sum = w(i, e);
      for (std::size_t j = 0; j < i; ++j) sum -= static_cast<double>(a(i, j)) * u[j * d_v + e];
      u[i * d_v + e] = beta(i) * sum;
    }
  Tensor2 out = Tensor2::from_shape({c, d_v});
  for (std::size_t i = 0; i < c * d_v; ++i) {
    require(std::isfinite(u[i]) && std::fabs(u[i]) <= 3.4e38, fn, "the solution is beyond float's range");
    out.data()[i] = static_cast<float>(u[i]);
  }
  return out;
  // END EXERCISE
}

}  // namespace tvlab::student
