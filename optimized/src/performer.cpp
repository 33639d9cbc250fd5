#include "tvlab/opt/performer.hpp"

#include <omp.h>
#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "detail/blas.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/ref/performer.hpp"

namespace tvlab::opt {
namespace {

using Batch = xsimd::batch<float>;

// xsimd's float exp is finite below about 88.38 (float's own limit is ln(FLT_MAX) = 88.72): the
// feature map computes exp(e) itself only up to here, and leaves the rest to the reference.
constexpr float kLargestFloatExponent = 88.0f;
// The reference computes each feature exp(e) in double, normal for |e| <= 708: within +-700 of it,
// its answer and ours agree; beyond, it reports the error (or loses digits) and its answer is the one.
constexpr double kLargestDoubleExponent = 700.0;
// The smallest stabilised normaliser trusted: the products of features lost to float's underflow
// are each below 2^-126, at most n_k m of them, so under 2^-66 n_k m of a normaliser of 2^-60.
constexpr float kSmallestNormaliser = 0x1p-60f;
// Inputs beyond this (after scaling) give exponents beyond +-700 unless W's rows are as long, and
// could overflow float's sums of squares: the reference takes them.
constexpr float kLargestInput = 1e4f;
// Positions per chunk of the causal form.
constexpr std::size_t kChunk = 64;

// W [m, d] rounded once to float, for the SGEMMs.
std::vector<float> features_as_float(const PerformerFeatures& features) {
  const double* w = features.w.data();
  return std::vector<float>(w, w + features.w.size());
}

// The exponents of phi+(scale x) for `rows` rows of x (width d), into e [rows, m]:
// e_r = omega_r^T (scale x) - |scale x|^2 / 2, that is E = scale X W^T (one SGEMM) minus a row constant,
// the squared norm summed in double (one pass over x).
void feature_exponents(const float* x, std::size_t rows, std::size_t d, const float* w, std::size_t m, float scale,
                       float* e) {
  detail::sgemm(rows, m, d, scale, x, d, w, d, /*transpose_b=*/true, 0.0f, e, m);
  for (std::size_t i = 0; i < rows; ++i) {
    const float* row = x + i * d;
    double squared_norm = 0.0;
#pragma omp simd reduction(+ : squared_norm)
    for (std::size_t c = 0; c < d; ++c) squared_norm += static_cast<double>(row[c]) * row[c];
    const auto half = static_cast<float>(0.5 * static_cast<double>(scale) * scale * squared_norm);
    float* e_row = e + i * m;
#pragma omp simd
    for (std::size_t r = 0; r < m; ++r) e_row[r] -= half;
  }
}

// The smallest and largest of `count` floats (finite ones: the exponents of finite inputs).
void min_max(const float* x, std::size_t count, float& lo, float& hi) {
  lo = x[0];
  hi = x[0];
#pragma omp simd reduction(min : lo) reduction(max : hi)
  for (std::size_t i = 0; i < count; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
}

// x_i <- exp(x_i - shift) for `count` floats, in place: xsimd's exp, since the compiler does not
// vectorise std::exp.
void exp_shifted(float* x, std::size_t count, float shift) {
  const std::size_t vec_end = count - count % Batch::size;
  for (std::size_t i = 0; i < vec_end; i += Batch::size)
    xsimd::exp(Batch::load_unaligned(x + i) - Batch(shift)).store_unaligned(x + i);
  for (std::size_t i = vec_end; i < count; ++i) x[i] = std::exp(x[i] - shift);
}

// z += phi(K)^T 1: the column sums of `rows` feature rows of width m.
void add_column_sums(const float* features, std::size_t rows, std::size_t m, float* z) {
  for (std::size_t j = 0; j < rows; ++j) {
    const float* row = features + j * m;
#pragma omp simd
    for (std::size_t c = 0; c < m; ++c) z[c] += row[c];
  }
}

// S = phi(K)^T V + beta S, phi(K) [rows, m] and V [rows, d_v] row-major: the state's update.
void add_keys_to_state(const float* phi_k, const float* v, std::size_t rows, std::size_t m, std::size_t d_v, float beta,
                       float* s) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(d_v),
              static_cast<int>(rows), 1.0f, phi_k, static_cast<int>(m), v, static_cast<int>(d_v), beta, s,
              static_cast<int>(d_v));
}

// Whether row i's float result can stand for the reference's: its stabilised normaliser den far
// above float's underflow, and the true one, e^{c_i + M} den / m (the 1/sqrt(m) of both features),
// and the numerators it bounds (times max|v|) well inside double's range, where the reference's
// features and sums are exact to rounding.
bool trusted(float den, double shift, double log_m, double log_max_v) {
  if (!(den >= kSmallestNormaliser) || !std::isfinite(den)) return false;
  const double log_den = shift + std::log(static_cast<double>(den)) - log_m;
  return log_den > -kLargestDoubleExponent && log_den + log_max_v < kLargestDoubleExponent;
}

int head_threads(std::size_t heads) {
  return static_cast<int>(std::min<std::size_t>(heads, static_cast<std::size_t>(omp_get_max_threads())));
}

// One head's output rows from its stabilised features, every key at once: S = phi(K)^T V, z =
// phi(K)^T 1, numerators phi(Q) S (SGEMM) and normalisers phi(Q) z (SGEMV). False at the first row
// that is not trusted.
bool non_causal_head(const float* phi_q, const float* phi_k, const float* v, std::size_t n_q, std::size_t n_k,
                     std::size_t m, std::size_t d_v, const float* query_max, float key_max, double log_m,
                     double log_max_v, float* o) {
  std::vector<float> s(m * d_v), z(m, 0.0f), den(n_q);
  add_keys_to_state(phi_k, v, n_k, m, d_v, 0.0f, s.data());
  add_column_sums(phi_k, n_k, m, z.data());
  detail::sgemm(n_q, d_v, m, 1.0f, phi_q, m, s.data(), d_v, false, 0.0f, o, d_v);
  cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(n_q), static_cast<int>(m), 1.0f, phi_q,
              static_cast<int>(m), z.data(), 1, 0.0f, den.data(), 1);
  for (std::size_t i = 0; i < n_q; ++i) {
    if (!trusted(den[i], static_cast<double>(query_max[i]) + key_max, log_m, log_max_v)) return false;
    const float inverse = 1.0f / den[i];
#pragma omp simd
    for (std::size_t e = 0; e < d_v; ++e) o[i * d_v + e] *= inverse;
  }
  return true;
}

// The same over j <= i, in chunks of kChunk positions: a chunk's queries read the state of the
// chunks before it (phi(Q_c) S, phi(Q_c) z) plus their masked products with the chunk's own keys
// (A = phi(Q_c) phi(K_c)^T, A_ij = 0 for j > i, A V_c and A's row sums); then the chunk's keys join
// the state (S += phi(K_c)^T V_c, z += phi(K_c)^T 1). As `opt::causal_linear_attention_chunked`.
bool causal_head(const float* phi_q, const float* phi_k, const float* v, std::size_t n, std::size_t m,
                 std::size_t d_v, const float* query_max, float key_max, double log_m, double log_max_v, float* o) {
  const std::size_t chunk = std::min(n, kChunk);
  std::vector<float> s(m * d_v, 0.0f), z(m, 0.0f), a(chunk * chunk), den(chunk);
  for (std::size_t start = 0; start < n; start += chunk) {
    const std::size_t rows = std::min(n, start + chunk) - start;
    const float* q_c = phi_q + start * m;
    const float* k_c = phi_k + start * m;
    const float* v_c = v + start * d_v;
    float* o_c = o + start * d_v;
    // inter-chunk: O_c = phi(Q_c) S, den = phi(Q_c) z
    detail::sgemm(rows, d_v, m, 1.0f, q_c, m, s.data(), d_v, false, 0.0f, o_c, d_v);
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(rows), static_cast<int>(m), 1.0f, q_c,
                static_cast<int>(m), z.data(), 1, 0.0f, den.data(), 1);
    // intra-chunk: A = phi(Q_c) phi(K_c)^T masked to j <= i, den += row sums of A, O_c += A V_c
    detail::sgemm(rows, rows, m, 1.0f, q_c, m, k_c, m, true, 0.0f, a.data(), rows);
    for (std::size_t i = 0; i < rows; ++i) {
      float* a_row = a.data() + i * rows;
      std::fill(a_row + i + 1, a_row + rows, 0.0f);
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (std::size_t j = 0; j <= i; ++j) sum += a_row[j];
      den[i] += sum;
    }
    detail::sgemm(rows, d_v, rows, 1.0f, a.data(), rows, v_c, d_v, false, 1.0f, o_c, d_v);
    // the state: S += phi(K_c)^T V_c, z += phi(K_c)^T 1
    add_keys_to_state(k_c, v_c, rows, m, d_v, 1.0f, s.data());
    add_column_sums(k_c, rows, m, z.data());
    for (std::size_t i = 0; i < rows; ++i) {
      if (!trusted(den[i], static_cast<double>(query_max[start + i]) + key_max, log_m, log_max_v)) return false;
      const float inverse = 1.0f / den[i];
#pragma omp simd
      for (std::size_t e = 0; e < d_v; ++e) o_c[i * d_v + e] *= inverse;
    }
  }
  return true;
}

}  // namespace

Tensor3 performer_feature_map(const Tensor3& x, const PerformerFeatures& features) {
  const char* fn = "performer_feature_map";
  ref::validate_performer_feature_map_inputs(fn, x, features);
  if (max_abs_or_inf(x.data(), x.size()) > kLargestInput) return ref::performer_feature_map(x, features);
  const std::size_t h = x.shape()[0], n = x.shape()[1], m = features.num_features(), d = features.head_dim();
  const std::vector<float> w = features_as_float(features);
  // phi+(x)_r = exp(e_r - ln sqrt(m)): the 1/sqrt(m) inside, so that no intermediate overflows
  const auto log_sqrt_m = static_cast<float>(0.5 * std::log(static_cast<double>(m)));
  Tensor3 phi = Tensor3::from_shape({h, n, m});
  std::vector<unsigned char> beyond_float(h, 0);
  detail::SingleThreadedBlas single_threaded;  // the threads are OpenMP's, one head each
#pragma omp parallel for schedule(static) num_threads(head_threads(h))
  for (std::ptrdiff_t hh = 0; hh < static_cast<std::ptrdiff_t>(h); ++hh) {
    const auto head = static_cast<std::size_t>(hh);
    float* e = phi.data() + head * n * m;
    // E = X W^T - |x|^2/2, written where the features go
    feature_exponents(x.data() + head * n * d, n, d, w.data(), m, 1.0f, e);
    float lo = 0.0f, hi = 0.0f;
    min_max(e, n * m, lo, hi);
    if (hi - log_sqrt_m > kLargestFloatExponent) {
      beyond_float[head] = 1;
      continue;
    }
    exp_shifted(e, n * m, log_sqrt_m);
  }
  // a feature near or beyond float's largest value: the reference computes it, or names the row
  if (std::find(beyond_float.begin(), beyond_float.end(), 1) != beyond_float.end())
    return ref::performer_feature_map(x, features);
  return phi;
}

Tensor3 performer_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const PerformerFeatures& features,
                            bool causal) {
  const char* fn = "performer_attention";
  ref::validate_performer_attention_inputs(fn, q, k, v, features, causal);
  const std::size_t h = q.shape()[0], n_q = q.shape()[1], n_k = k.shape()[1], d_v = v.shape()[2];
  const std::size_t m = features.num_features(), d = features.head_dim();
  // q^ = d^{-1/4} q and k^ = d^{-1/4} k: q^ . k^ = q . k / sqrt(d)
  const auto input_scale = static_cast<float>(std::pow(static_cast<double>(d), -0.25));
  const float largest_input = std::max(max_abs_or_inf(q.data(), q.size()), max_abs_or_inf(k.data(), k.size()));
  if (input_scale * largest_input > kLargestInput) return ref::performer_attention(q, k, v, features, causal);
  const double log_m = std::log(static_cast<double>(m));
  const double log_max_v = std::log(std::max(1.0f, max_abs_or_inf(v.data(), v.size())));
  const std::vector<float> w = features_as_float(features);
  Tensor3 o = Tensor3::from_shape({h, n_q, d_v});
  std::vector<unsigned char> untrusted(h, 0);
  detail::SingleThreadedBlas single_threaded;  // the threads are OpenMP's, one head each
#pragma omp parallel for schedule(static) num_threads(head_threads(h))
  for (std::ptrdiff_t hh = 0; hh < static_cast<std::ptrdiff_t>(h); ++hh) {
    const auto head = static_cast<std::size_t>(hh);
    std::vector<float> phi_k(n_k * m), phi_q(n_q * m), query_max(n_q);
    // the exponents of phi+(k^_j) and phi+(q^_i), [n_k, m] and [n_q, m]
    feature_exponents(k.data() + head * n_k * d, n_k, d, w.data(), m, input_scale, phi_k.data());
    feature_exponents(q.data() + head * n_q * d, n_q, d, w.data(), m, input_scale, phi_q.data());
    // M = the head's largest key exponent, c_i = query i's largest; every exponent within +-700
    float key_min = 0.0f, key_max = 0.0f;
    min_max(phi_k.data(), n_k * m, key_min, key_max);
    bool in_range = key_min >= -kLargestDoubleExponent && key_max <= kLargestDoubleExponent;
    for (std::size_t i = 0; i < n_q && in_range; ++i) {
      float query_min = 0.0f;
      min_max(phi_q.data() + i * m, m, query_min, query_max[i]);
      in_range = query_min >= -kLargestDoubleExponent && query_max[i] <= kLargestDoubleExponent;
    }
    if (!in_range) {
      untrusted[head] = 1;
      continue;
    }
    // phi(k^_j)_r = exp(e_jr - M) and phi(q^_i)_r = exp(e_ir - c_i), all at most 1: the shifts and
    // the 1/sqrt(m) of both cancel in o_i's ratio
    exp_shifted(phi_k.data(), n_k * m, key_max);
    for (std::size_t i = 0; i < n_q; ++i) exp_shifted(phi_q.data() + i * m, m, query_max[i]);
    const float* v_head = v.data() + head * n_k * d_v;
    float* o_head = o.data() + head * n_q * d_v;
    const bool good = causal ? causal_head(phi_q.data(), phi_k.data(), v_head, n_q, m, d_v, query_max.data(), key_max,
                                           log_m, log_max_v, o_head)
                             : non_causal_head(phi_q.data(), phi_k.data(), v_head, n_q, n_k, m, d_v, query_max.data(),
                                               key_max, log_m, log_max_v, o_head);
    if (!good) untrusted[head] = 1;
  }
  // a row float cannot be trusted with: the reference's answer, or its error
  if (std::find(untrusted.begin(), untrusted.end(), 1) != untrusted.end())
    return ref::performer_attention(q, k, v, features, causal);
  return o;
}

}  // namespace tvlab::opt
