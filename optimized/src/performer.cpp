#include "tvlab/opt/performer.hpp"

#include <omp.h>
#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "detail/blas.hpp"
#include "detail/causal_chunk_mask.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/core/xt.hpp"
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
// The products of features lost to float's underflow are each below 2^-126 (the largest feature of a
// query and of every column of keys being 1), at most n_k m of them: a stabilised normaliser of at
// least 2^-100 n_k m loses under 2^-26 of itself to them.
constexpr float kUnderflowMargin = 0x1p-100f;
// Inputs or entries of W beyond this (after scaling): their float products could overflow, and
// their exponents are beyond +-700 unless both are as large; the reference takes them.
constexpr double kLargestInput = 1e4;
// Positions per chunk of the causal form, and keys per block of the non-causal one.
constexpr std::size_t kChunk = 64;
// Queries per block of the non-causal form: [256, m] features (256 KiB at m = 256) stay in L2
// between their exponentials and their SGEMM, which is efficient at this height.
constexpr std::size_t kQueryBlock = 256;

// W [m, d] rounded once to float, for the SGEMMs.
std::vector<float> features_as_float(const PerformerFeatures& features) {
  const double* w = features.w.data();
  return std::vector<float>(w, w + features.w.size());
}

// Whether float can hold the exponents' products: every |x| and every |w| at most kLargestInput
// (then |omega^T x| <= 1e8 d).
bool within_float(float largest_x, const PerformerFeatures& features) {
  return static_cast<double>(largest_x) <= kLargestInput &&
         static_cast<double>(xt::amax(xt::abs(features.w))()) <= kLargestInput;
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

// The key features of `rows` rows of exponents e [rows, m], in place: phi(k_j)_r = exp(e_jr - M_r),
// each feature r shifted by its own M_r.
void key_features(float* e, std::size_t rows, std::size_t m, const float* key_max) {
  const std::size_t vec_end = m - m % Batch::size;
  for (std::size_t j = 0; j < rows; ++j) {
    float* row = e + j * m;
    for (std::size_t r = 0; r < vec_end; r += Batch::size)
      xsimd::exp(Batch::load_unaligned(row + r) - Batch::load_unaligned(key_max + r)).store_unaligned(row + r);
    for (std::size_t r = vec_end; r < m; ++r) row[r] = std::exp(row[r] - key_max[r]);
  }
}

// The query features of `rows` rows of exponents e [rows, m], in place, the keys' shifts M_r moved
// to the queries (the product phi(q)_r phi(k)_r is unchanged): phi(q_i)_r = exp(e_ir + M_r - c_i)
// with c_i = max_r (e_ir + M_r), recorded in shift[i].
void query_features(float* e, std::size_t rows, std::size_t m, const float* key_max, float* shift) {
  for (std::size_t i = 0; i < rows; ++i) {
    float* row = e + i * m;
    float c = -INFINITY;
#pragma omp simd reduction(max : c)
    for (std::size_t r = 0; r < m; ++r) {
      row[r] += key_max[r];
      c = std::max(c, row[r]);
    }
    exp_shifted(row, m, c);
    shift[i] = c;
  }
}

// M_r <- max(M_r, max_j e_jr) over `rows` rows of exponents e [rows, m].
void raise_column_max(const float* e, std::size_t rows, std::size_t m, float* key_max) {
  for (std::size_t j = 0; j < rows; ++j) {
    const float* row = e + j * m;
#pragma omp simd
    for (std::size_t r = 0; r < m; ++r) key_max[r] = std::max(key_max[r], row[r]);
  }
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

// What decides whether a row's float result can stand for the reference's.
struct Trust {
  float smallest_den;  // 2^-100 n_k m: the products lost to underflow are under 2^-26 of it
  double log_m;        // ln m: the 1/sqrt(m) of both features
  double log_max_v;    // ln max(1, max|v|): the numerators are at most max|v| times the normaliser
};

// Row i: its stabilised normaliser den far above what float's underflow loses, and the true one,
// e^{c_i} den / m, and the numerators it bounds well inside double's range, where the reference's
// features and sums are exact to rounding.
bool trusted(float den, float shift, const Trust& t) {
  if (!(den >= t.smallest_den) || !std::isfinite(den)) return false;
  const double log_den = static_cast<double>(shift) + std::log(static_cast<double>(den)) - t.log_m;
  return log_den > -kLargestDoubleExponent && log_den + t.log_max_v < kLargestDoubleExponent;
}

// o_i <- o_i / den_i for `rows` rows of width d_v, each first checked; false at the first not trusted.
bool normalise_rows(float* o, const float* den, const float* shift, std::size_t rows, std::size_t d_v, const Trust& t) {
  for (std::size_t i = 0; i < rows; ++i) {
    if (!trusted(den[i], shift[i], t)) return false;
    const float inverse = 1.0f / den[i];
#pragma omp simd
    for (std::size_t e = 0; e < d_v; ++e) o[i * d_v + e] *= inverse;
  }
  return true;
}

int head_threads(std::size_t heads) {
  return static_cast<int>(std::min<std::size_t>(heads, static_cast<std::size_t>(omp_get_max_threads())));
}

// How a head's rows become exponents: W `[m, d]` in float, and the inputs' scale.
struct ExponentMap {
  const float* w;
  std::size_t m, d;
  float scale;
};

// The exponents of `rows` rows of x into e `[rows, m]` (`feature_exponents`), while they are in
// cache checked to lie within +-700, where the reference's double features are exact to rounding.
bool exponents_in_range(const ExponentMap& map, const float* x, std::size_t rows, float* e) {
  feature_exponents(x, rows, map.d, map.w, map.m, map.scale, e);
  float lo = 0.0f, hi = 0.0f;
  min_max(e, rows * map.m, lo, hi);
  return lo >= -kLargestDoubleExponent && hi <= kLargestDoubleExponent;
}

// One head's output rows, every key at once (false at the first row not trusted, or an exponent
// out of range). M_r = max_j e_jr: every feature r has a key whose feature is 1, and the query's
// largest shifted exponent is 0, so its normaliser is at least 1.
// - the keys' exponents, in blocks of kChunk rows (M_r raised while a block is in cache), then their
//   features, S = phi(K)^T V (SGEMM) and z = phi(K)^T 1;
// - the queries in blocks of kQueryBlock rows: exponents, features, numerators phi(Q_b) S (SGEMM) and
//   normalisers phi(Q_b) z (SGEMV). A block's features never leave the cache, and no [n_q, m] buffer.
bool non_causal_head(const ExponentMap& map, const float* q, const float* k, const float* v, std::size_t n_q,
                     std::size_t n_k, std::size_t d_v, const Trust& trust, float* o) {
  const std::size_t m = map.m, d = map.d, block = std::min(n_q, kQueryBlock);
  std::vector<float> phi_k(n_k * m), key_max(m, -INFINITY), s(m * d_v), z(m, 0.0f);
  std::vector<float> phi_q(block * m), shift(block), den(block);
  for (std::size_t j0 = 0; j0 < n_k; j0 += kChunk) {
    const std::size_t rows = std::min(kChunk, n_k - j0);
    if (!exponents_in_range(map, k + j0 * d, rows, phi_k.data() + j0 * m)) return false;
    raise_column_max(phi_k.data() + j0 * m, rows, m, key_max.data());
  }
  key_features(phi_k.data(), n_k, m, key_max.data());
  add_keys_to_state(phi_k.data(), v, n_k, m, d_v, 0.0f, s.data());
  add_column_sums(phi_k.data(), n_k, m, z.data());
  for (std::size_t i0 = 0; i0 < n_q; i0 += block) {
    const std::size_t rows = std::min(block, n_q - i0);
    if (!exponents_in_range(map, q + i0 * d, rows, phi_q.data())) return false;
    query_features(phi_q.data(), rows, m, key_max.data(), shift.data());
    detail::sgemm(rows, d_v, m, 1.0f, phi_q.data(), m, s.data(), d_v, false, 0.0f, o + i0 * d_v, d_v);
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(rows), static_cast<int>(m), 1.0f, phi_q.data(),
                static_cast<int>(m), z.data(), 1, 0.0f, den.data(), 1);
    if (!normalise_rows(o + i0 * d_v, den.data(), shift.data(), rows, d_v, trust)) return false;
  }
  return true;
}

// The same over j <= i, in chunks of kChunk positions, each chunk's exponents and features computed
// as it comes (no [n, m] buffer). M_r is the largest exponent of feature r among the keys so far: a
// chunk that raises it first rescales the state's row r by exp(M_r old - M_r new). The chunk's
// queries read the state of the chunks before it (phi(Q_c) S, phi(Q_c) z) plus their masked products
// with the chunk's own keys (A = phi(Q_c) phi(K_c)^T, A_ij = 0 for j > i, A V_c and A's row sums);
// then the chunk's keys join the state (S += phi(K_c)^T V_c, z += phi(K_c)^T 1), as in
// `opt::causal_linear_attention_chunked`.
bool causal_head(const ExponentMap& map, const float* q, const float* k, const float* v, std::size_t n,
                 std::size_t d_v, const Trust& trust, float* o) {
  const std::size_t m = map.m, d = map.d, chunk = std::min(n, kChunk);
  std::vector<float> key_max(m, -INFINITY), old_max(m), shift(chunk), s(m * d_v, 0.0f), z(m, 0.0f);
  std::vector<float> q_c(chunk * m), k_c(chunk * m), a(chunk * chunk), den(chunk);
  for (std::size_t start = 0; start < n; start += chunk) {
    const std::size_t rows = std::min(n, start + chunk) - start;
    const float* v_c = v + start * d_v;
    float* o_c = o + start * d_v;
    if (!exponents_in_range(map, k + start * d, rows, k_c.data()) ||
        !exponents_in_range(map, q + start * d, rows, q_c.data()))
      return false;
    // M_r raised by the chunk's keys: S_r and z_r, sums of exp(e_jr - M_r old), rescaled to M_r new
    std::copy(key_max.begin(), key_max.end(), old_max.begin());
    raise_column_max(k_c.data(), rows, m, key_max.data());
    if (start > 0)
      for (std::size_t r = 0; r < m; ++r) {
        if (old_max[r] == key_max[r]) continue;
        const float rescale = std::exp(old_max[r] - key_max[r]);
        z[r] *= rescale;
#pragma omp simd
        for (std::size_t e = 0; e < d_v; ++e) s[r * d_v + e] *= rescale;
      }
    key_features(k_c.data(), rows, m, key_max.data());
    query_features(q_c.data(), rows, m, key_max.data(), shift.data());
    // inter-chunk: O_c = phi(Q_c) S, den = phi(Q_c) z
    detail::sgemm(rows, d_v, m, 1.0f, q_c.data(), m, s.data(), d_v, false, 0.0f, o_c, d_v);
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(rows), static_cast<int>(m), 1.0f, q_c.data(),
                static_cast<int>(m), z.data(), 1, 0.0f, den.data(), 1);
    // intra-chunk: A = phi(Q_c) phi(K_c)^T masked to j <= i, den += row sums of A, O_c += A V_c
    detail::sgemm(rows, rows, m, 1.0f, q_c.data(), m, k_c.data(), m, true, 0.0f, a.data(), rows);
    detail::mask_causal_and_add_row_sums(a.data(), rows, den.data());
    detail::sgemm(rows, d_v, rows, 1.0f, a.data(), rows, v_c, d_v, false, 1.0f, o_c, d_v);
    // the state: S += phi(K_c)^T V_c, z += phi(K_c)^T 1
    add_keys_to_state(k_c.data(), v_c, rows, m, d_v, 1.0f, s.data());
    add_column_sums(k_c.data(), rows, m, z.data());
    if (!normalise_rows(o_c, den.data(), shift.data(), rows, d_v, trust)) return false;
  }
  return true;
}

}  // namespace

Tensor3 performer_feature_map(const Tensor3& x, const PerformerFeatures& features) {
  const char* fn = "performer_feature_map";
  ref::validate_performer_feature_map_inputs(fn, x, features);
  if (!within_float(max_abs_or_inf(x.data(), x.size()), features)) return ref::performer_feature_map(x, features);
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
    if (!(hi - log_sqrt_m <= kLargestFloatExponent)) {  // (a NaN too)
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
  if (!within_float(input_scale * largest_input, features)) return ref::performer_attention(q, k, v, features, causal);
  const Trust trust{kUnderflowMargin * static_cast<float>(n_k * m), std::log(static_cast<double>(m)),
                    std::log(std::max(1.0, static_cast<double>(max_abs_or_inf(v.data(), v.size()))))};
  const std::vector<float> w = features_as_float(features);
  const ExponentMap map{w.data(), m, d, input_scale};
  Tensor3 o = Tensor3::from_shape({h, n_q, d_v});
  std::vector<unsigned char> untrusted(h, 0);
  detail::SingleThreadedBlas single_threaded;  // the threads are OpenMP's, one head each
#pragma omp parallel for schedule(static) num_threads(head_threads(h))
  for (std::ptrdiff_t hh = 0; hh < static_cast<std::ptrdiff_t>(h); ++hh) {
    const auto head = static_cast<std::size_t>(hh);
    const float* q_head = q.data() + head * n_q * d;
    const float* k_head = k.data() + head * n_k * d;
    const float* v_head = v.data() + head * n_k * d_v;
    float* o_head = o.data() + head * n_q * d_v;
    const bool good = causal ? causal_head(map, q_head, k_head, v_head, n_q, d_v, trust, o_head)
                             : non_causal_head(map, q_head, k_head, v_head, n_q, n_k, d_v, trust, o_head);
    if (!good) untrusted[head] = 1;
  }
  // a row float cannot be trusted with: the reference's answer, or its error
  if (std::find(untrusted.begin(), untrusted.end(), 1) != untrusted.end())
    return ref::performer_attention(q, k, v, features, causal);
  return o;
}

}  // namespace tvlab::opt
