#include "tvlab/ref/linear_attention.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tvlab/core/error.hpp"

namespace tvlab::ref {
namespace {

// phi(x) of one number.
double phi(double x, FeatureMap map) {
  switch (map) {
    case FeatureMap::elu_plus_one: return x > 0.0 ? x + 1.0 : std::exp(x);  // elu(x) + 1
    case FeatureMap::relu: return std::max(x, 0.0);
    case FeatureMap::identity: return x;
  }
  return x;
}

void require_known_map(const char* fn, FeatureMap map) {
  const auto value = static_cast<int>(map);
  require(value >= 0 && value <= static_cast<int>(FeatureMap::identity), fn, "cfg.feature_map (", value,
          ") is not a FeatureMap: elu_plus_one, relu or identity");
}

// The output row o = numerator / denominator (or the numerator alone), checking the normaliser:
// zero when phi(q) and every phi(k) so far share no positive coordinate (ReLU features).
void write_row(const char* fn, const LinearAttentionConfig& cfg, const std::vector<double>& numerator,
               double denominator, float* out, std::size_t head, std::size_t row) {
  if (cfg.normalize)
    require(denominator != 0.0 && std::isfinite(denominator), fn, "the normaliser phi(q_i) . sum_j phi(k_j) of head ",
            head, ", query ", row, " is ", denominator, ": cfg.feature_map (", to_string(cfg.feature_map),
            ") gives the query no positive weight on any key; use elu_plus_one, or cfg.normalize = false");
  for (std::size_t e = 0; e < numerator.size(); ++e) {
    const double value = cfg.normalize ? numerator[e] / denominator : numerator[e];
    require(std::isfinite(value) && std::fabs(value) <= 3.4e38, fn, "the output of head ", head, ", query ", row,
            " is beyond float's range: scale q, k or v down");
    out[e] = static_cast<float>(value);
  }
}

// The running sums of one head, in double: S = sum_j phi(k_j) v_j^T `[m, d_v]` and z = sum_j phi(k_j)
// `[m]`, the state every form but the parallel one keeps.
struct RunningSums {
  std::size_t m, d_v;
  std::vector<double> s, z;

  RunningSums(std::size_t features, std::size_t value_dim)
      : m(features), d_v(value_dim), s(features * value_dim, 0.0), z(features, 0.0) {}
  // The sums a state holds for `head`.
  RunningSums(const LinearAttentionState& state, std::size_t head, std::size_t features, std::size_t value_dim)
      : RunningSums(features, value_dim) {
    for (std::size_t c = 0; c < m; ++c) {
      z[c] = state.z(head, c);
      for (std::size_t e = 0; e < d_v; ++e) s[c * d_v + e] = state.s(head, c, e);
    }
  }
  // S += phi(k_j) v_j^T,  z += phi(k_j)
  void add(const Tensor3& k, const Tensor3& v, std::size_t head, std::size_t j, FeatureMap map) {
    for (std::size_t c = 0; c < m; ++c) {
      const double phi_k = phi(k(head, j, c), map);
      z[c] += phi_k;
      for (std::size_t e = 0; e < d_v; ++e) s[c * d_v + e] += phi_k * v(head, j, e);
    }
  }
  // numerator += scale phi(q_i)^T S,  denominator += scale phi(q_i)^T z
  void read(const Tensor3& q, std::size_t head, std::size_t i, const LinearAttentionConfig& cfg,
            std::vector<double>& numerator, double& denominator) const {
    for (std::size_t c = 0; c < m; ++c) {
      const double phi_q = cfg.scale * phi(q(head, i, c), cfg.feature_map);
      denominator += phi_q * z[c];
      for (std::size_t e = 0; e < d_v; ++e) numerator[e] += phi_q * s[c * d_v + e];
    }
  }
  // The sums into `state` for `head`, rounded to float.
  void store(LinearAttentionState& state, std::size_t head) const {
    for (std::size_t c = 0; c < m; ++c) {
      state.z(head, c) = static_cast<float>(z[c]);
      for (std::size_t e = 0; e < d_v; ++e) state.s(head, c, e) = static_cast<float>(s[c * d_v + e]);
    }
  }
};

}  // namespace

// The checks every form shares: q, k, v non-empty and finite, of one head count, q and k of one
// width, k and v of one length; the scale positive and finite.
void validate_linear_attention_inputs(const char* fn, const Tensor3& q, const Tensor3& k, const Tensor3& v,
                     const LinearAttentionConfig& cfg, bool same_length) {
  require_nonempty(fn, "q", q);
  require_nonempty(fn, "k", k);
  require_nonempty(fn, "v", v);
  require_dim(fn, "k", k, 0, "heads", q.shape()[0], "the heads of q");
  require_dim(fn, "v", v, 0, "heads", q.shape()[0], "the heads of q");
  require_dim(fn, "k", k, 2, "d_k", q.shape()[2], "the d_k of q");
  require_dim(fn, "v", v, 1, "seq", k.shape()[1], "the seq of k");
  if (same_length) require_dim(fn, "k", k, 1, "seq", q.shape()[1], "the seq of q: a causal form pairs position i of both");
  require_finite_max_abs(fn, "q", q);  // one vectorised pass each (element by element only for the error)
  require_finite_max_abs(fn, "k", k);
  require_finite_max_abs(fn, "v", v);
  require_known_map(fn, cfg.feature_map);
  require(std::isfinite(cfg.scale) && cfg.scale > 0.0, fn, "cfg.scale (", cfg.scale, ") must be positive and finite");
}

void validate_linear_attention_state(const char* fn, const LinearAttentionState& state, const Tensor3& q, const Tensor3& v) {
  const std::size_t h = q.shape()[0], m = q.shape()[2], d_v = v.shape()[2];
  validate_linear_attention_state_shape(fn, state, h, m, d_v);
  require_finite_max_abs(fn, "state.s", state.s);
  require_finite_max_abs(fn, "state.z", state.z);
}

Tensor3 feature_map(const Tensor3& x, FeatureMap map) {
  const char* fn = "feature_map";
  require_known_map(fn, map);
  require_finite(fn, "x", x);
  Tensor3 y = Tensor3::from_shape(x.shape());
  // phi applied to every element (the three maps are elementwise)
  for (std::size_t i = 0; i < x.size(); ++i) y.data()[i] = static_cast<float>(phi(x.data()[i], map));
  return y;
}

Tensor3 linear_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const LinearAttentionConfig& cfg) {
  const char* fn = "linear_attention";
  validate_linear_attention_inputs(fn, q, k, v, cfg, /*same_length=*/false);
  const std::size_t h = q.shape()[0], n_q = q.shape()[1], n_k = k.shape()[1], m = q.shape()[2], d_v = v.shape()[2];
  Tensor3 o = Tensor3::from_shape({h, n_q, d_v});
  for (std::size_t head = 0; head < h; ++head) {
    // S = sum_j phi(k_j) v_j^T  [m, d_v]  and  z = sum_j phi(k_j)  [m]: computed once, O(n m d_v)
    RunningSums sums(m, d_v);
    for (std::size_t j = 0; j < n_k; ++j) sums.add(k, v, head, j, cfg.feature_map);
    // o_i = scale phi(q_i)^T S / (scale phi(q_i)^T z)
    for (std::size_t i = 0; i < n_q; ++i) {
      std::vector<double> numerator(d_v, 0.0);
      double denominator = 0.0;
      sums.read(q, head, i, cfg, numerator, denominator);
      write_row(fn, cfg, numerator, denominator, &o(head, i, 0), head, i);
    }
  }
  return o;
}

Tensor3 causal_linear_attention_recurrent(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                          const LinearAttentionConfig& cfg, LinearAttentionState& state) {
  const char* fn = "causal_linear_attention_recurrent";
  validate_linear_attention_inputs(fn, q, k, v, cfg, /*same_length=*/true);
  validate_linear_attention_state(fn, state, q, v);
  const std::size_t h = q.shape()[0], n = q.shape()[1], m = q.shape()[2], d_v = v.shape()[2];
  Tensor3 o = Tensor3::from_shape({h, n, d_v});
  LinearAttentionState next = state;  // committed only when every row succeeded
  for (std::size_t head = 0; head < h; ++head) {
    RunningSums sums(state, head, m, d_v);
    for (std::size_t t = 0; t < n; ++t) {
      // S_t = S_{t-1} + phi(k_t) v_t^T,  z_t = z_{t-1} + phi(k_t): first, so that position t sees itself
      sums.add(k, v, head, t, cfg.feature_map);
      // o_t = scale phi(q_t)^T S_t / (scale phi(q_t)^T z_t)
      std::vector<double> numerator(d_v, 0.0);
      double denominator = 0.0;
      sums.read(q, head, t, cfg, numerator, denominator);
      write_row(fn, cfg, numerator, denominator, &o(head, t, 0), head, t);
    }
    sums.store(next, head);
  }
  state = next;
  return o;
}

Tensor3 causal_linear_attention_parallel(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                         const LinearAttentionConfig& cfg) {
  const char* fn = "causal_linear_attention_parallel";
  validate_linear_attention_inputs(fn, q, k, v, cfg, /*same_length=*/true);
  const std::size_t h = q.shape()[0], n = q.shape()[1], m = q.shape()[2], d_v = v.shape()[2];
  Tensor3 o = Tensor3::from_shape({h, n, d_v});
  for (std::size_t head = 0; head < h; ++head)
    for (std::size_t i = 0; i < n; ++i) {
      // A_ij = scale phi(q_i) . phi(k_j) for j <= i (M_ij = [j <= i]); o_i = sum_j A_ij v_j / sum_j A_ij
      std::vector<double> numerator(d_v, 0.0);
      double denominator = 0.0;
      for (std::size_t j = 0; j <= i; ++j) {
        double a = 0.0;
        for (std::size_t c = 0; c < m; ++c)
          a += cfg.scale * phi(q(head, i, c), cfg.feature_map) * phi(k(head, j, c), cfg.feature_map);
        denominator += a;
        for (std::size_t e = 0; e < d_v; ++e) numerator[e] += a * v(head, j, e);
      }
      write_row(fn, cfg, numerator, denominator, &o(head, i, 0), head, i);
    }
  return o;
}

Tensor3 causal_linear_attention_chunked(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                        const LinearAttentionConfig& cfg, std::size_t chunk_size,
                                        LinearAttentionState& state) {
  const char* fn = "causal_linear_attention_chunked";
  validate_linear_attention_inputs(fn, q, k, v, cfg, /*same_length=*/true);
  validate_linear_attention_state(fn, state, q, v);
  require(chunk_size >= 1, fn, "chunk_size (", chunk_size, ") must be at least 1");
  const std::size_t h = q.shape()[0], n = q.shape()[1], m = q.shape()[2], d_v = v.shape()[2];
  Tensor3 o = Tensor3::from_shape({h, n, d_v});
  LinearAttentionState next = state;
  for (std::size_t head = 0; head < h; ++head) {
    RunningSums sums(state, head, m, d_v);  // S_[c-1] and z_[c-1]: the sums over every chunk before this one
    for (std::size_t start = 0; start < n; start += chunk_size) {
      const std::size_t end = std::min(n, start + chunk_size);
      for (std::size_t i = start; i < end; ++i) {
        std::vector<double> numerator(d_v, 0.0);
        double denominator = 0.0;
        // inter-chunk: scale phi(q_i)^T S_[c-1] and scale phi(q_i)^T z_[c-1]
        sums.read(q, head, i, cfg, numerator, denominator);
        // intra-chunk: (phi(Q) phi(K)^T o M) V over the chunk's positions j <= i
        for (std::size_t j = start; j <= i; ++j) {
          double a = 0.0;
          for (std::size_t c = 0; c < m; ++c)
            a += cfg.scale * phi(q(head, i, c), cfg.feature_map) * phi(k(head, j, c), cfg.feature_map);
          denominator += a;
          for (std::size_t e = 0; e < d_v; ++e) numerator[e] += a * v(head, j, e);
        }
        write_row(fn, cfg, numerator, denominator, &o(head, i, 0), head, i);
      }
      // S_[c] = S_[c-1] + phi(K_[c])^T V_[c],  z_[c] = z_[c-1] + phi(K_[c])^T 1
      for (std::size_t j = start; j < end; ++j) sums.add(k, v, head, j, cfg.feature_map);
    }
    sums.store(next, head);
  }
  state = next;
  return o;
}

void validate_linear_attention_state_shape(const char* fn, const LinearAttentionState& state, std::size_t h,
                                           std::size_t m, std::size_t d_v) {
  require_dim(fn, "state.s", state.s, 0, "heads", h, "the heads of q");
  require_dim(fn, "state.s", state.s, 1, "features", m, "the d_k of q");
  require_dim(fn, "state.s", state.s, 2, "d_v", d_v, "the d_v of v");
  require_dim(fn, "state.z", state.z, 0, "heads", h, "the heads of q");
  require_dim(fn, "state.z", state.z, 1, "features", m, "the d_k of q");
}

void require_known_feature_map(const char* fn, FeatureMap map) { require_known_map(fn, map); }

}  // namespace tvlab::ref
