#include "tvlab/ref/delta_rule.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "tvlab/core/error.hpp"

namespace tvlab::ref {
namespace {

// A tensor with no element stands for "not given" (no gate, a zero initial state).
template <class T>
bool given(const T& tensor) {
  return tensor.size() != 0;
}

// The inputs of one call in double, ready for the recurrence: q already multiplied by the scale,
// q and k divided by their L2 norms when cfg asks, and one log gate per (head, position, channel)
// (a scalar gate repeated in every channel, zeros without a gate): the whole family is one loop.
struct Inputs {
  std::size_t h = 0, n = 0, d_k = 0, d_v = 0;
  std::vector<double> q, k, g;  // [h, n, d_k]
  const Tensor2* beta = nullptr;
  bool delta = true;

  std::size_t at(std::size_t head, std::size_t t) const { return (head * n + t) * d_k; }
};

void require_in_unit_interval(const char* fn, const Tensor2& beta) {
  for (std::size_t head = 0; head < beta.shape()[0]; ++head)
    for (std::size_t t = 0; t < beta.shape()[1]; ++t) {
      const float b = beta(head, t);
      require(b >= 0.0f && b <= 1.0f, fn, "beta (", b, " at head ", head, ", position ", t,
              ") is a writing strength and must lie in [0, 1]");
    }
}

// A log gate g = log(alpha) with alpha in (0, 1]: g <= 0 (g > 0 would grow the state every step).
template <class T>
void require_log_gate(const char* fn, const char* name, const T& gate) {
  require_finite_max_abs(fn, name, gate);
  for (std::size_t i = 0; i < gate.size(); ++i)
    require(gate.data()[i] <= 0.0f, fn, name, " (", gate.data()[i], " at flat index ", i,
            ") is a log gate log(alpha) with alpha in (0, 1], so it must be <= 0");
}

void validate(const char* fn, const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor2& beta,
              const DeltaRuleGate& gate, const DeltaRuleConfig& cfg, const Tensor3& initial_state,
              bool scan_qkv = true) {
  require_nonempty(fn, "q", q);
  require_nonempty(fn, "k", k);
  require_nonempty(fn, "v", v);
  const std::size_t h = q.shape()[0], n = q.shape()[1], d_k = q.shape()[2], d_v = v.shape()[2];
  require_dim(fn, "k", k, 0, "heads", h, "the heads of q");
  require_dim(fn, "k", k, 1, "seq", n, "the seq of q");
  require_dim(fn, "k", k, 2, "d_k", d_k, "the d_k of q");
  require_dim(fn, "v", v, 0, "heads", h, "the heads of q");
  require_dim(fn, "v", v, 1, "seq", n, "the seq of q");
  require_dim(fn, "beta", beta, 0, "heads", h, "the heads of q");
  require_dim(fn, "beta", beta, 1, "seq", n, "the seq of q");
  // one vectorised pass per tensor (a decode step's state is d_k d_v floats per head)
  if (scan_qkv) {
    require_finite_max_abs(fn, "q", q);
    require_finite_max_abs(fn, "k", k);
    require_finite_max_abs(fn, "v", v);
  }
  require_finite_max_abs(fn, "beta", beta);
  require_in_unit_interval(fn, beta);
  require(!(given(gate.scalar) && given(gate.per_channel)), fn,
          "gate.scalar and gate.per_channel are both given; a step has one forget gate, give at most one");
  if (given(gate.scalar)) {
    require_dim(fn, "gate.scalar", gate.scalar, 0, "heads", h, "the heads of q");
    require_dim(fn, "gate.scalar", gate.scalar, 1, "seq", n, "the seq of q");
    require_log_gate(fn, "gate.scalar", gate.scalar);
  }
  if (given(gate.per_channel)) {
    require_dim(fn, "gate.per_channel", gate.per_channel, 0, "heads", h, "the heads of q");
    require_dim(fn, "gate.per_channel", gate.per_channel, 1, "seq", n, "the seq of q");
    require_dim(fn, "gate.per_channel", gate.per_channel, 2, "d_k", d_k, "the d_k of q: one gate per row of S");
    require_log_gate(fn, "gate.per_channel", gate.per_channel);
  }
  if (given(initial_state)) {
    require_dim(fn, "initial_state", initial_state, 0, "heads", h, "the heads of q");
    require_dim(fn, "initial_state", initial_state, 1, "d_k", d_k, "the d_k of q");
    require_dim(fn, "initial_state", initial_state, 2, "d_v", d_v, "the d_v of v");
    require_finite_max_abs(fn, "initial_state", initial_state);
  }
  if (cfg.scale)
    require(std::isfinite(*cfg.scale) && *cfg.scale > 0.0, fn, "cfg.scale (", *cfg.scale,
            ") must be positive and finite");
}

// factor * x / ||x||_2 for row (head, t) of x, in double (factor * x without `normalize`).
void load_row(const char* fn, const char* name, const Tensor3& x, std::size_t head, std::size_t t, bool normalize,
              double factor, double* out) {
  const std::size_t d = x.shape()[2];
  double norm = 1.0;
  if (normalize) {
    double sum_sq = 0.0;
    for (std::size_t c = 0; c < d; ++c) sum_sq += static_cast<double>(x(head, t, c)) * x(head, t, c);
    norm = std::sqrt(sum_sq);
    require(norm > 0.0, fn, name, " has a zero row at head ", head, ", position ", t,
            ": cfg.l2_normalize_qk cannot divide it by its norm 0");
  }
  for (std::size_t c = 0; c < d; ++c) out[c] = factor * x(head, t, c) / norm;
}

Inputs prepare(const char* fn, const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor2& beta,
               const DeltaRuleGate& gate, const DeltaRuleConfig& cfg, const Tensor3& initial_state) {
  validate(fn, q, k, v, beta, gate, cfg, initial_state);
  Inputs in;
  in.h = q.shape()[0];
  in.n = q.shape()[1];
  in.d_k = q.shape()[2];
  in.d_v = v.shape()[2];
  in.beta = &beta;
  in.delta = cfg.delta;
  const double scale = cfg.scale.value_or(1.0 / std::sqrt(static_cast<double>(in.d_k)));
  in.q.resize(in.h * in.n * in.d_k);
  in.k.resize(in.q.size());
  in.g.assign(in.q.size(), 0.0);
  for (std::size_t head = 0; head < in.h; ++head)
    for (std::size_t t = 0; t < in.n; ++t) {
      // scale q / ||q|| and k / ||k|| (or q and k as given)
      load_row(fn, "q", q, head, t, cfg.l2_normalize_qk, scale, &in.q[in.at(head, t)]);
      load_row(fn, "k", k, head, t, cfg.l2_normalize_qk, 1.0, &in.k[in.at(head, t)]);
      for (std::size_t c = 0; c < in.d_k; ++c) {
        if (given(gate.scalar)) in.g[in.at(head, t) + c] = gate.scalar(head, t);
        if (given(gate.per_channel)) in.g[in.at(head, t) + c] = gate.per_channel(head, t, c);
      }
    }
  return in;
}

// The state S_0 of one head, [d_k, d_v] row-major, zeros when no initial state is given.
std::vector<double> initial_state_of(const Tensor3& initial_state, const Inputs& in, std::size_t head) {
  std::vector<double> s(in.d_k * in.d_v, 0.0);
  if (given(initial_state))
    for (std::size_t c = 0; c < in.d_k; ++c)
      for (std::size_t e = 0; e < in.d_v; ++e) s[c * in.d_v + e] = initial_state(head, c, e);
  return s;
}

// The largest beta_t ||k_t||^2 of a head up to position `last`: the delta rule's update multiplies
// the state by I - beta k k^T, whose eigenvalue along k is 1 - beta ||k||^2; beyond 2 it lies
// below -1 and the state grows along k at every such step.
double largest_beta_key_norm_sq(const Inputs& in, std::size_t head, std::size_t last) {
  double largest = 0.0;
  for (std::size_t t = 0; t <= last; ++t) {
    double norm_sq = 0.0;
    for (std::size_t c = 0; c < in.d_k; ++c) norm_sq += in.k[in.at(head, t) + c] * in.k[in.at(head, t) + c];
    largest = std::max(largest, (*in.beta)(head, t) * norm_sq);
  }
  return largest;
}

// Throws when a value (of the state or of an output) does not fit in a float, saying why it grew.
void require_float_range(const char* fn, const char* what, const std::vector<double>& values, const Inputs& in,
                         std::size_t head, std::size_t position) {
  for (double x : values) {
    if (std::fabs(x) <= FLT_MAX) continue;  // false for NaN too
    std::ostringstream why;
    const double growth = largest_beta_key_norm_sq(in, head, position);
    if (in.delta && growth > 2.0)
      why << "keys with beta ||k||^2 > 2 (here up to " << growth
          << ") make the delta rule unstable (the update I - beta k k^T has an eigenvalue below -1); keys of norm at "
             "most sqrt(2/beta) keep it bounded: normalise them (cfg.l2_normalize_qk)";
    else
      why << "scale q, k or v down";
    fail(fn, "the ", what, " of head ", head, " grew beyond float's range at position ", position, ": ", why.str());
  }
}

void store_state(const std::vector<double>& s, std::size_t head, Tensor3& state) {
  for (std::size_t i = 0; i < s.size(); ++i) state.data()[head * s.size() + i] = static_cast<float>(s[i]);
}

}  // namespace

void validate_delta_rule(const char* fn, const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor2& beta,
                         const DeltaRuleGate& gate, const DeltaRuleConfig& cfg, const Tensor3& initial_state,
                         bool scan_qkv) {
  validate(fn, q, k, v, beta, gate, cfg, initial_state, scan_qkv);
}

DeltaRuleOutput delta_rule_recurrent(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor2& beta,
                                     const DeltaRuleGate& gate, const DeltaRuleConfig& cfg,
                                     const Tensor3& initial_state) {
  const char* fn = "delta_rule_recurrent";
  const Inputs in = prepare(fn, q, k, v, beta, gate, cfg, initial_state);
  const std::size_t d_k = in.d_k, d_v = in.d_v;
  DeltaRuleOutput out{Tensor3::from_shape({in.h, in.n, d_v}), Tensor3::from_shape({in.h, d_k, d_v})};
  for (std::size_t head = 0; head < in.h; ++head) {
    std::vector<double> s = initial_state_of(initial_state, in, head), u(d_v), o(d_v);
    for (std::size_t t = 0; t < in.n; ++t) {
      const double* q_t = &in.q[in.at(head, t)];
      const double* k_t = &in.k[in.at(head, t)];
      const double* g_t = &in.g[in.at(head, t)];
      const double beta_t = beta(head, t);
      // decay: S~ = diag(e^{g_t}) S_{t-1}, row c of S times e^{g_t[c]}
      for (std::size_t c = 0; c < d_k; ++c) {
        const double alpha = std::exp(g_t[c]);  // once per row, not per element
        for (std::size_t e = 0; e < d_v; ++e) s[c * d_v + e] *= alpha;
      }
      // predict: u_t = beta_t (v_t - S~^T k_t) with the decayed state, or beta_t v_t without the delta rule
      for (std::size_t e = 0; e < d_v; ++e) {
        double prediction = 0.0;
        if (in.delta)
          for (std::size_t c = 0; c < d_k; ++c) prediction += s[c * d_v + e] * k_t[c];
        u[e] = beta_t * (v(head, t, e) - prediction);
      }
      // write: S_t = S~ + k_t u_t^T
      for (std::size_t c = 0; c < d_k; ++c)
        for (std::size_t e = 0; e < d_v; ++e) s[c * d_v + e] += k_t[c] * u[e];
      // read: o_t = S_t^T (scale q_t)
      for (std::size_t e = 0; e < d_v; ++e) {
        o[e] = 0.0;
        for (std::size_t c = 0; c < d_k; ++c) o[e] += s[c * d_v + e] * q_t[c];
      }
      require_float_range(fn, "state", s, in, head, t);
      require_float_range(fn, "output", o, in, head, t);
      for (std::size_t e = 0; e < d_v; ++e) out.o(head, t, e) = static_cast<float>(o[e]);
    }
    store_state(s, head, out.state);
  }
  return out;
}

DeltaRuleOutput delta_rule_chunked(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor2& beta,
                                   const DeltaRuleGate& gate, const DeltaRuleConfig& cfg, std::size_t chunk_size,
                                   const Tensor3& initial_state) {
  const char* fn = "delta_rule_chunked";
  require(chunk_size >= 1, fn, "chunk_size (", chunk_size, ") must be at least 1");
  const Inputs in = prepare(fn, q, k, v, beta, gate, cfg, initial_state);
  const std::size_t d_k = in.d_k, d_v = in.d_v;
  DeltaRuleOutput out{Tensor3::from_shape({in.h, in.n, d_v}), Tensor3::from_shape({in.h, d_k, d_v})};
  // Within a chunk that starts from S_0, unrolling the recurrence gives every state at once,
  //   S_i = diag(e^{G_i}) S_0 + sum_{j <= i} diag(e^{G_i - G_j}) k_j u_j^T,
  // and putting the decayed state before step i into u_i = beta_i (v_i - (D_i S_{i-1})^T k_i) leaves
  // one unknown coupling the steps: the u_j of the same chunk, through a triangular system.
  for (std::size_t head = 0; head < in.h; ++head) {
    std::vector<double> s = initial_state_of(initial_state, in, head);  // S_0 of the current chunk
    for (std::size_t start = 0; start < in.n; start += chunk_size) {
      const std::size_t len = std::min(chunk_size, in.n - start), last = start + len - 1;
      const double* kc = &in.k[in.at(head, start)];  // k_i of the chunk: kc[i * d_k + c]
      const double* qc = &in.q[in.at(head, start)];
      // G_i[c] = sum_{s <= i} g_s[c]: the log decay from the chunk's start through position i
      std::vector<double> G(len * d_k);
      for (std::size_t i = 0; i < len; ++i)
        for (std::size_t c = 0; c < d_k; ++c)
          G[i * d_k + c] = (i > 0 ? G[(i - 1) * d_k + c] : 0.0) + in.g[in.at(head, start + i) + c];
      // A_ij = sum_c k_i[c] k_j[c] e^{G_i[c] - G_j[c]} for j < i: key j decayed to position i, read by key i
      std::vector<double> A(len * len, 0.0);
      for (std::size_t i = 0; i < len; ++i)
        for (std::size_t j = 0; j < i; ++j)
          for (std::size_t c = 0; c < d_k; ++c)
            A[i * len + j] += kc[i * d_k + c] * kc[j * d_k + c] * std::exp(G[i * d_k + c] - G[j * d_k + c]);
      // W = diag(beta) (V - (K o e^G) S_0): each step's correction against the carried state alone,
      // decayed to its position (diag(beta) V without the delta rule)
      std::vector<double> U(len * d_v);
      for (std::size_t i = 0; i < len; ++i) {
        // (K o e^G)_i, formed once for the row's d_v predictions
        std::vector<double> decayed_k(d_k);
        for (std::size_t c = 0; c < d_k; ++c) decayed_k[c] = kc[i * d_k + c] * std::exp(G[i * d_k + c]);
        for (std::size_t e = 0; e < d_v; ++e) {
          double prediction = 0.0;
          if (in.delta)
            for (std::size_t c = 0; c < d_k; ++c) prediction += decayed_k[c] * s[c * d_v + e];
          U[i * d_v + e] = beta(head, start + i) * (v(head, start + i, e) - prediction);
        }
      }
      // (I + StrictLower(diag(beta) A)) U = W by forward substitution, in place:
      // u_i = w_i - beta_i sum_{j<i} A_ij u_j: the correction less what the chunk's earlier writes predict at k_i
      // (nothing to solve without the delta rule: U = W)
      if (in.delta)
        for (std::size_t i = 0; i < len; ++i)
          for (std::size_t j = 0; j < i; ++j)
            for (std::size_t e = 0; e < d_v; ++e)
              U[i * d_v + e] -= beta(head, start + i) * A[i * len + j] * U[j * d_v + e];
      // o_i = S_0^T (e^{G_i} o scale q_i) + sum_{j <= i} u_j (k_j^T diag(e^{G_i - G_j}) scale q_i)
      std::vector<double> o(d_v);
      for (std::size_t i = 0; i < len; ++i) {
        std::fill(o.begin(), o.end(), 0.0);
        for (std::size_t c = 0; c < d_k; ++c) {
          const double decayed_q = std::exp(G[i * d_k + c]) * qc[i * d_k + c];
          for (std::size_t e = 0; e < d_v; ++e) o[e] += s[c * d_v + e] * decayed_q;
        }
        for (std::size_t j = 0; j <= i; ++j) {
          double weight = 0.0;
          for (std::size_t c = 0; c < d_k; ++c)
            weight += kc[j * d_k + c] * std::exp(G[i * d_k + c] - G[j * d_k + c]) * qc[i * d_k + c];
          for (std::size_t e = 0; e < d_v; ++e) o[e] += weight * U[j * d_v + e];
        }
        require_float_range(fn, "output", o, in, head, start + i);
        for (std::size_t e = 0; e < d_v; ++e) out.o(head, start + i, e) = static_cast<float>(o[e]);
      }
      // S_C = diag(e^{G_C}) S_0 + sum_j diag(e^{G_C - G_j}) k_j u_j^T: the next chunk's S_0
      const double* G_C = &G[(len - 1) * d_k];
      std::vector<double> carried_k(len);  // e^{G_C[c] - G_j[c]} k_j[c] of channel c, formed once per channel
      for (std::size_t c = 0; c < d_k; ++c) {
        const double alpha = std::exp(G_C[c]);
        for (std::size_t j = 0; j < len; ++j) carried_k[j] = std::exp(G_C[c] - G[j * d_k + c]) * kc[j * d_k + c];
        for (std::size_t e = 0; e < d_v; ++e) {
          double value = alpha * s[c * d_v + e];
          for (std::size_t j = 0; j < len; ++j) value += carried_k[j] * U[j * d_v + e];
          s[c * d_v + e] = value;
        }
      }
      require_float_range(fn, "state", s, in, head, last);
    }
    store_state(s, head, out.state);
  }
  return out;
}

}  // namespace tvlab::ref
