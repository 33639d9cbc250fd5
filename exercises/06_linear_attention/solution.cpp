// Chapter 06 exercises: worked solutions. Each marked region is what a student writes;
// scripts/make_student.py turns this file into student.cpp with the regions replaced by
// NotImplemented stubs. Edit this file, then regenerate (`make student-stubs`).

#include <algorithm>
#include <cmath>
#include <vector>

#include "tvlab/core/error.hpp"
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

}  // namespace tvlab::student
