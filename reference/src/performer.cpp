#include "tvlab/ref/performer.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/core/rng.hpp"

namespace tvlab::ref {
namespace {

// exp(x) is finite in double up to x = ln(DBL_MAX) = 709.78, in float up to ln(FLT_MAX) = 88.72.
const double kLogDoubleMax = std::log(DBL_MAX);
const double kLogFloatMax = std::log(static_cast<double>(FLT_MAX));

double dot(const double* a, const double* b, std::size_t d) {
  double sum = 0.0;
  for (std::size_t c = 0; c < d; ++c) sum += a[c] * b[c];
  return sum;
}

// Rows [0, rows) of one ORF block (rows <= d), in place: the Gaussian rows g_r of w (row-major,
// width d) made orthogonal one after the other, u_r = g_r - sum_{p<r} (g_r . u_p) u_p / ||u_p||^2, each
// then given back the length of its g_r. The projections are removed twice ("twice is enough",
// Giraud et al. 2005): one pass leaves rounding errors of the order of eps times the block's
// condition number, the second brings them to eps. A residual shorter than 1e-6 of g_r (g_r almost
// in the span of the rows before it: probability 0 in exact arithmetic) is replaced by a new
// Gaussian row, so that no direction comes from rounding.
void orthogonalize_block(Rng& rng, std::size_t rows, std::size_t d, double* w) {
  std::vector<double> unit(rows * d);  // u_p / ||u_p||
  for (std::size_t r = 0; r < rows; ++r) {
    double* g = w + r * d;
    const double length = std::sqrt(dot(g, g, d));  // chi(d), independent of g's direction
    double residual = 0.0;
    for (;;) {
      for (int pass = 0; pass < 2; ++pass)
        for (std::size_t p = 0; p < r; ++p) {
          const double projection = dot(g, &unit[p * d], d);
          for (std::size_t c = 0; c < d; ++c) g[c] -= projection * unit[p * d + c];
        }
      residual = std::sqrt(dot(g, g, d));
      if (residual > 1e-6 * length) break;
      for (std::size_t c = 0; c < d; ++c) g[c] = rng.normal();
    }
    for (std::size_t c = 0; c < d; ++c) {
      unit[r * d + c] = g[c] / residual;
      g[c] = length * unit[r * d + c];
    }
  }
}

// The exponents e_r = omega_r^T x - |x|^2 / 2 of phi+(x)_r = exp(e_r) / sqrt(m), for the row x (d floats)
// scaled by `scale`, in double.
void feature_exponents(const PerformerFeatures& features, const float* row, double scale, std::vector<double>& x,
                       std::vector<double>& exponents) {
  const std::size_t m = features.num_features(), d = features.head_dim();
  for (std::size_t c = 0; c < d; ++c) x[c] = scale * static_cast<double>(row[c]);
  const double half_squared_norm = 0.5 * dot(x.data(), x.data(), d);
  for (std::size_t r = 0; r < m; ++r) exponents[r] = dot(&features.w(r, 0), x.data(), d) - half_squared_norm;
}

// The largest exponent of a row, checked against `limit` (the log of the largest value the result
// can hold): beyond it the feature overflows, and the input must be scaled down.
void require_in_range(const char* fn, const char* name, const std::vector<double>& exponents, double limit,
                      const char* range, std::size_t head, std::size_t row) {
  const auto largest = std::max_element(exponents.begin(), exponents.end());
  require(*largest <= limit, fn, name, " (head ", head, ", row ", row, ") gives feature ", largest - exponents.begin(),
          " the exponent omega_r^T x - |x|^2/2 = ", *largest, ", beyond ", range, " (", limit, "): scale ", name,
          " down");
}

}  // namespace

PerformerFeatures draw_performer_features(std::size_t num_features, std::size_t head_dim, RandomFeatureKind kind,
                                          RowNorms norms, std::uint64_t seed) {
  const char* fn = "draw_performer_features";
  require_positive(fn, "num_features (m)", num_features);
  require_positive(fn, "head_dim (d)", head_dim);
  require(kind == RandomFeatureKind::iid || kind == RandomFeatureKind::orthogonal, fn, "kind (",
          static_cast<int>(kind), ") is not a RandomFeatureKind: iid or orthogonal");
  require(norms == RowNorms::chi || norms == RowNorms::sqrt_d, fn, "norms (", static_cast<int>(norms),
          ") is not a RowNorms: chi or sqrt_d");
  checked_element_count(fn, {num_features, head_dim});
  const std::size_t m = num_features, d = head_dim;
  PerformerFeatures features;
  features.w = xt::zeros<double>({m, d});
  features.kind = kind;
  features.norms = norms;
  features.seed = seed;
  Rng rng(seed);
  double* w = features.w.data();
  // omega_r ~ N(0, I_d), row after row: a direction uniform on the sphere, a length chi(d)
  for (std::size_t i = 0; i < m * d; ++i) w[i] = rng.normal();
  if (kind == RandomFeatureKind::orthogonal)
    // the same rows, orthogonalised in blocks of d (the last one m mod d rows), each keeping its length
    for (std::size_t start = 0; start < m; start += d)
      orthogonalize_block(rng, std::min(d, m - start), d, w + start * d);
  if (norms == RowNorms::sqrt_d)
    // ||omega_r|| = sqrt(d), the mean of ||omega||^2 for omega ~ N(0, I_d) (biased low: see RowNorms)
    for (std::size_t r = 0; r < m; ++r) {
      const double length = std::sqrt(dot(w + r * d, w + r * d, d));
      for (std::size_t c = 0; c < d; ++c) w[r * d + c] *= std::sqrt(static_cast<double>(d)) / length;
    }
  return features;
}

void validate_performer_feature_map_inputs(const char* fn, const Tensor3& x, const PerformerFeatures& features) {
  validate_performer_features(fn, features);
  require_nonempty(fn, "x", x);
  require_dim(fn, "x", x, 2, "d", features.head_dim(), "the head_dim of the features, the columns of features.w");
  require_finite(fn, "x", x);
}

void validate_performer_attention_inputs(const char* fn, const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                         const PerformerFeatures& features, bool causal) {
  validate_performer_features(fn, features);
  require_nonempty(fn, "q", q);
  require_nonempty(fn, "k", k);
  require_nonempty(fn, "v", v);
  require_dim(fn, "k", k, 0, "heads", q.shape()[0], "the heads of q");
  require_dim(fn, "v", v, 0, "heads", q.shape()[0], "the heads of q");
  require_dim(fn, "q", q, 2, "d", features.head_dim(), "the head_dim of the features, the columns of features.w");
  require_dim(fn, "k", k, 2, "d", features.head_dim(), "the head_dim of the features, the columns of features.w");
  require_dim(fn, "v", v, 1, "seq", k.shape()[1], "the seq of k");
  if (causal)
    require_dim(fn, "k", k, 1, "seq", q.shape()[1], "the seq of q: causal attention pairs position i of both");
  require_finite(fn, "q", q);
  require_finite(fn, "k", k);
  require_finite(fn, "v", v);
}

Tensor3 performer_feature_map(const Tensor3& x, const PerformerFeatures& features) {
  const char* fn = "performer_feature_map";
  validate_performer_feature_map_inputs(fn, x, features);
  const std::size_t h = x.shape()[0], n = x.shape()[1], m = features.num_features(), d = features.head_dim();
  Tensor3 phi = Tensor3::from_shape({h, n, m});
  std::vector<double> row(d), exponents(m);
  // exp(e_r) / sqrt(m) <= FLT_MAX  <=>  e_r <= ln(FLT_MAX) + ln(sqrt(m))
  const double limit = kLogFloatMax + 0.5 * std::log(static_cast<double>(m));
  for (std::size_t head = 0; head < h; ++head)
    for (std::size_t i = 0; i < n; ++i) {
      feature_exponents(features, &x(head, i, 0), 1.0, row, exponents);
      require_in_range(fn, "x", exponents, limit, "float's range", head, i);
      // phi+(x)_r = exp(omega_r^T x - |x|^2/2) / sqrt(m)
      for (std::size_t r = 0; r < m; ++r)
        phi(head, i, r) = static_cast<float>(std::exp(exponents[r]) / std::sqrt(static_cast<double>(m)));
    }
  return phi;
}

Tensor3 performer_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const PerformerFeatures& features,
                            bool causal) {
  const char* fn = "performer_attention";
  validate_performer_attention_inputs(fn, q, k, v, features, causal);
  const std::size_t h = q.shape()[0], n_q = q.shape()[1], n_k = k.shape()[1], d_v = v.shape()[2];
  const std::size_t m = features.num_features(), d = features.head_dim();
  // q^ = d^{-1/4} q and k^ = d^{-1/4} k: q^ . k^ = q . k / sqrt(d), the softmax's scaled score
  const double input_scale = std::pow(static_cast<double>(d), -0.25);
  // 1/sqrt(m) cancels in the ratio below; it is kept so that phi+(q^) . phi+(k^) is the kernel's estimate
  const double inv_sqrt_m = 1.0 / std::sqrt(static_cast<double>(m));
  Tensor3 o = Tensor3::from_shape({h, n_q, d_v});
  std::vector<double> x(d), exponents(m), phi_q(m), numerator(d_v);
  for (std::size_t head = 0; head < h; ++head) {
    // phi+(k^_j) for every key, in double
    std::vector<double> phi_k(n_k * m);
    for (std::size_t j = 0; j < n_k; ++j) {
      feature_exponents(features, &k(head, j, 0), input_scale, x, exponents);
      require_in_range(fn, "k", exponents, kLogDoubleMax, "double's range", head, j);
      for (std::size_t r = 0; r < m; ++r) phi_k[j * m + r] = std::exp(exponents[r]) * inv_sqrt_m;
    }
    // S = sum_j phi+(k^_j) v_j^T  [m, d_v]  and  z = sum_j phi+(k^_j)  [m]: over every key before
    // the first query, or grown by key i just before query i reads them (causal: j <= i)
    std::vector<double> s(m * d_v, 0.0), z(m, 0.0);
    const auto add_key = [&](std::size_t j) {
      for (std::size_t r = 0; r < m; ++r) {
        z[r] += phi_k[j * m + r];
        for (std::size_t e = 0; e < d_v; ++e) s[r * d_v + e] += phi_k[j * m + r] * v(head, j, e);
      }
    };
    if (!causal)
      for (std::size_t j = 0; j < n_k; ++j) add_key(j);
    for (std::size_t i = 0; i < n_q; ++i) {
      if (causal) add_key(i);
      feature_exponents(features, &q(head, i, 0), input_scale, x, exponents);
      require_in_range(fn, "q", exponents, kLogDoubleMax, "double's range", head, i);
      for (std::size_t r = 0; r < m; ++r) phi_q[r] = std::exp(exponents[r]) * inv_sqrt_m;
      // o_i = phi+(q^_i)^T S / phi+(q^_i)^T z
      std::fill(numerator.begin(), numerator.end(), 0.0);
      double denominator = 0.0;
      for (std::size_t r = 0; r < m; ++r) {
        denominator += phi_q[r] * z[r];
        for (std::size_t e = 0; e < d_v; ++e) numerator[e] += phi_q[r] * s[r * d_v + e];
      }
      // Positive features give a positive normaliser, unless the products of features are all
      // below double's smallest value (0) or one is beyond its largest (inf): inputs far too large.
      require(denominator > 0.0, fn, "the normaliser phi+(q^_i) . sum_j phi+(k^_j) of head ", head, ", query ", i,
              " underflows to 0 (every feature product below 1e-308): q and k are too large for the "
              "features' exponents omega_r^T x - |x|^2/2; scale q and k down");
      require(std::isfinite(denominator), fn, "the normaliser phi+(q^_i) . sum_j phi+(k^_j) of head ", head, ", query ",
              i, " overflows double: scale q and k down");
      for (std::size_t e = 0; e < d_v; ++e) {
        require(std::isfinite(numerator[e]), fn, "the numerator phi+(q^_i)^T S of head ", head, ", query ", i,
                " overflows double: scale q, k or v down");
        o(head, i, e) = static_cast<float>(numerator[e] / denominator);
      }
    }
  }
  return o;
}

}  // namespace tvlab::ref
