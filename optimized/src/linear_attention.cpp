#include "tvlab/opt/linear_attention.hpp"

#include <omp.h>
#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "detail/blas.hpp"
#include "detail/causal_chunk_mask.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/ref/linear_attention.hpp"

namespace tvlab::opt {
namespace {

// Rows of the parallel form's blocks: a [64, n] score block per thread.
constexpr std::size_t kParallelBlockRows = 64;

using Batch = xsimd::batch<float>;

// scale * phi(x) of `count` floats into out. One loop per map, so that each is a plain SIMD loop.
void apply_feature_map(const float* x, std::size_t count, FeatureMap map, float scale, float* out) {
  switch (map) {
    case FeatureMap::elu_plus_one: {
      // elu(x) + 1 = x + 1 for x > 0, e^x otherwise; xsimd's exp, since the compiler does not
      // vectorise std::exp (e^min(x, 0): no overflow in the lanes that take x + 1)
      const std::size_t vec_end = count - count % Batch::size;
      for (std::size_t i = 0; i < vec_end; i += Batch::size) {
        const Batch xi = Batch::load_unaligned(x + i);
        const Batch phi = xsimd::select(xi > Batch(0.0f), xi + Batch(1.0f), xsimd::exp(xsimd::min(xi, Batch(0.0f))));
        (Batch(scale) * phi).store_unaligned(out + i);
      }
      for (std::size_t i = vec_end; i < count; ++i) out[i] = scale * (x[i] > 0.0f ? x[i] + 1.0f : std::exp(x[i]));
      return;
    }
    case FeatureMap::relu:
#pragma omp simd
      for (std::size_t i = 0; i < count; ++i) out[i] = scale * std::max(x[i], 0.0f);
      return;
    case FeatureMap::identity:
#pragma omp simd
      for (std::size_t i = 0; i < count; ++i) out[i] = scale * x[i];
      return;
  }
}

// C[m, n] = A^T B + beta C, A stored [k, m], B [k, n], row-major: phi(K)^T V, the state's update.
void sgemm_transposed_a(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda, const float* b,
                        std::size_t ldb, float beta, float* c, std::size_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// z += phi(K)^T 1: the column sums of `rows` feature rows of width m.
void add_column_sums(const float* features, std::size_t rows, std::size_t m, float* z) {
  for (std::size_t j = 0; j < rows; ++j) {
    const float* row = features + j * m;
#pragma omp simd
    for (std::size_t c = 0; c < m; ++c) z[c] += row[c];
  }
}

float dot(const float* a, const float* b, std::size_t count) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (std::size_t i = 0; i < count; ++i) sum += a[i] * b[i];
  return sum;
}

// out_e = sum_c w_c S_ce for S [m, d_v] row-major (o = S^T w, a GEMV). Columns in blocks of four
// vectors whose partial sums stay in registers across the m rows: accumulating into `out` in
// memory instead would chain every row's FMA to the previous row's store of the same column.
void weighted_row_sum(const float* w, const float* s, std::size_t m, std::size_t d_v, float* out) {
  constexpr std::size_t kBlock = 4 * Batch::size;
  std::size_t e0 = 0;
  for (; e0 + kBlock <= d_v; e0 += kBlock) {
    Batch a0(0.0f), a1(0.0f), a2(0.0f), a3(0.0f);
    for (std::size_t c = 0; c < m; ++c) {
      const Batch wc(w[c]);
      const float* row = s + c * d_v + e0;
      a0 = xsimd::fma(wc, Batch::load_unaligned(row), a0);
      a1 = xsimd::fma(wc, Batch::load_unaligned(row + Batch::size), a1);
      a2 = xsimd::fma(wc, Batch::load_unaligned(row + 2 * Batch::size), a2);
      a3 = xsimd::fma(wc, Batch::load_unaligned(row + 3 * Batch::size), a3);
    }
    a0.store_unaligned(out + e0);
    a1.store_unaligned(out + e0 + Batch::size);
    a2.store_unaligned(out + e0 + 2 * Batch::size);
    a3.store_unaligned(out + e0 + 3 * Batch::size);
  }
  for (; e0 + Batch::size <= d_v; e0 += Batch::size) {
    Batch acc(0.0f);
    for (std::size_t c = 0; c < m; ++c) acc = xsimd::fma(Batch(w[c]), Batch::load_unaligned(s + c * d_v + e0), acc);
    acc.store_unaligned(out + e0);
  }
  for (; e0 < d_v; ++e0) {
    float acc = 0.0f;
    for (std::size_t c = 0; c < m; ++c) acc += w[c] * s[c * d_v + e0];
    out[e0] = acc;
  }
}

// S += key v^T (S [m, d_v] row-major, a rank-1 update) and z += key: one axpy per row of S.
void add_outer_product(const float* key, const float* v, std::size_t m, std::size_t d_v, float* s, float* z) {
  for (std::size_t c = 0; c < m; ++c) {
    float* s_row = s + c * d_v;
    const float key_c = key[c];
#pragma omp simd
    for (std::size_t e = 0; e < d_v; ++e) s_row[e] += key_c * v[e];
    z[c] += key_c;
  }
}

// The first output row of a head that cannot be written: its normaliser is zero or not finite, or
// its value is beyond float's range. Found inside the threads, reported after them (an exception
// cannot leave an OpenMP region).
struct BadRow {
  bool found = false;
  bool normaliser = false;  // true: the normaliser; false: the value's range
  std::size_t row = 0;
  float denominator = 0.0f;
};

// o_i <- o_i / den_i for `rows` rows of width d_v (or o_i as it is, unnormalised), checking each:
// the first row that fails is recorded in `bad` (rows numbered from `first_row`).
void normalise_rows(float* o, const float* denominators, std::size_t rows, std::size_t d_v, bool normalize,
                    std::size_t first_row, BadRow& bad) {
  for (std::size_t i = 0; i < rows && !bad.found; ++i) {
    float* row = o + i * d_v;
    if (normalize) {
      const float den = denominators[i];
      if (den == 0.0f || !std::isfinite(den)) {
        bad = {true, true, first_row + i, den};
        return;
      }
    }
    const float inverse = normalize ? 1.0f / denominators[i] : 1.0f;
    // x - x is 0 for a finite x and NaN for inf or NaN: one vectorised pass scales and checks
    float zeros = 0.0f;
#pragma omp simd reduction(+ : zeros)
    for (std::size_t e = 0; e < d_v; ++e) {
      row[e] *= inverse;
      zeros += row[e] - row[e];
    }
    if (zeros != 0.0f) bad = {true, false, first_row + i, 0.0f};
  }
}

// Throws the reference's error for the first head (in order) with a bad row, if any.
void report_bad_rows(const char* fn, const LinearAttentionConfig& cfg, const std::vector<BadRow>& bad) {
  for (std::size_t head = 0; head < bad.size(); ++head) {
    if (!bad[head].found) continue;
    require(!bad[head].normaliser, fn, "the normaliser phi(q_i) . sum_j phi(k_j) of head ", head, ", query ",
            bad[head].row, " is ", bad[head].denominator, ": cfg.feature_map (", to_string(cfg.feature_map),
            ") gives the query no positive weight on any key; use elu_plus_one, or cfg.normalize = false");
    require(false, fn, "the output of head ", head, ", query ", bad[head].row,
            " is beyond float's range: scale q, k or v down");
  }
}

int head_threads(std::size_t heads) {
  return static_cast<int>(std::min<std::size_t>(heads, static_cast<std::size_t>(omp_get_max_threads())));
}

}  // namespace

Tensor3 feature_map(const Tensor3& x, FeatureMap map) {
  const char* fn = "feature_map";
  ref::require_known_feature_map(fn, map);
  require_finite_max_abs(fn, "x", x);
  Tensor3 y = Tensor3::from_shape(x.shape());
  // phi applied to every element (the three maps are elementwise), in slices of 4096 per thread
  constexpr std::size_t kSlice = 4096;
  const auto slices = static_cast<std::ptrdiff_t>((x.size() + kSlice - 1) / kSlice);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t s = 0; s < slices; ++s) {
    const std::size_t begin = static_cast<std::size_t>(s) * kSlice, count = std::min(kSlice, x.size() - begin);
    apply_feature_map(x.data() + begin, count, map, 1.0f, y.data() + begin);
  }
  return y;
}

Tensor3 linear_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const LinearAttentionConfig& cfg) {
  const char* fn = "linear_attention";
  ref::validate_linear_attention_inputs(fn, q, k, v, cfg, /*same_length=*/false);
  const std::size_t h = q.shape()[0], n_q = q.shape()[1], n_k = k.shape()[1], m = q.shape()[2], d_v = v.shape()[2];
  const auto scale = static_cast<float>(cfg.scale);
  Tensor3 o = Tensor3::from_shape({h, n_q, d_v});
  std::vector<BadRow> bad(h);
  detail::SingleThreadedBlas single_threaded;  // the threads are OpenMP's, one head each
#pragma omp parallel for schedule(static) num_threads(head_threads(h))
  for (std::ptrdiff_t hh = 0; hh < static_cast<std::ptrdiff_t>(h); ++hh) {
    const auto head = static_cast<std::size_t>(hh);
    const float* v_head = v.data() + head * n_k * d_v;
    float* o_head = o.data() + head * n_q * d_v;
    std::vector<float> phi_k(n_k * m), phi_q(n_q * m), s(m * d_v), z(m, 0.0f), denominators(n_q);
    apply_feature_map(k.data() + head * n_k * m, n_k * m, cfg.feature_map, 1.0f, phi_k.data());
    apply_feature_map(q.data() + head * n_q * m, n_q * m, cfg.feature_map, scale, phi_q.data());
    // S = phi(K)^T V  [m, d_v]  and  z = phi(K)^T 1  [m]: the keys and values summed once
    sgemm_transposed_a(m, d_v, n_k, phi_k.data(), m, v_head, d_v, 0.0f, s.data(), d_v);
    add_column_sums(phi_k.data(), n_k, m, z.data());
    // numerators scale phi(Q) S  [n_q, d_v]  and normalisers scale phi(Q) z  [n_q]
    detail::sgemm(n_q, d_v, m, 1.0f, phi_q.data(), m, s.data(), d_v, false, 0.0f, o_head, d_v);
    if (cfg.normalize)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(n_q), static_cast<int>(m), 1.0f, phi_q.data(),
                  static_cast<int>(m), z.data(), 1, 0.0f, denominators.data(), 1);
    normalise_rows(o_head, denominators.data(), n_q, d_v, cfg.normalize, 0, bad[head]);
  }
  report_bad_rows(fn, cfg, bad);
  return o;
}

namespace {

// One token per head from `state` (a decode step), in one parallel region: each head's output
// from the state as it is, then, once every head's output is good, the state's update in place.
// No copy of the state, and the same head on the same thread in both loops (its S stays in that
// core's cache). Returns false, the state untouched, when a row of `bad` is set.
bool decode_step(const Tensor3& q, const Tensor3& k, const Tensor3& v, const LinearAttentionConfig& cfg,
                 LinearAttentionState& state, Tensor3& o, std::vector<BadRow>& bad) {
  const std::size_t h = q.shape()[0], m = q.shape()[2], d_v = v.shape()[2];
  const auto scale = static_cast<float>(cfg.scale);
  // One thread per 64K floats of state (256 KiB) at most: below that, waking a thread costs more
  // than the step (8 heads, d = 64, 128 KiB of state: 6 us on one thread, 10 us on two, measured).
  constexpr std::size_t kStateFloatsPerThread = 1 << 16;
  const int threads = std::max(1, std::min(head_threads(h), static_cast<int>(h * m * d_v / kStateFloatsPerThread)));
  std::vector<float> features(static_cast<std::size_t>(threads) * 2 * m);
#pragma omp parallel num_threads(threads)
  {
    float* phi_q = features.data() + static_cast<std::size_t>(omp_get_thread_num()) * 2 * m;
    float* phi_k = phi_q + m;
#pragma omp for schedule(static)
    for (std::ptrdiff_t hh = 0; hh < static_cast<std::ptrdiff_t>(h); ++hh) {
      const auto head = static_cast<std::size_t>(hh);
      const float* s = state.s.data() + head * m * d_v;
      const float* z = state.z.data() + head * m;
      apply_feature_map(q.data() + head * m, m, cfg.feature_map, scale, phi_q);
      apply_feature_map(k.data() + head * m, m, cfg.feature_map, 1.0f, phi_k);
      const float* v_t = v.data() + head * d_v;
      float* o_t = o.data() + head * d_v;
      // o_t = scale phi(q_t)^T S_{t-1} + (scale phi(q_t) . phi(k_t)) v_t: S_t read before it is written
      weighted_row_sum(phi_q, s, m, d_v, o_t);
      const float own = dot(phi_q, phi_k, m);
#pragma omp simd
      for (std::size_t e = 0; e < d_v; ++e) o_t[e] += own * v_t[e];
      // the normaliser scale phi(q_t)^T z_{t-1} + scale phi(q_t) . phi(k_t)
      const float denominator = dot(phi_q, z, m) + own;
      normalise_rows(o_t, &denominator, 1, d_v, cfg.normalize, 0, bad[head]);
    }
    // (the loop's barrier: every head's row is checked) the same answer on every thread
    const bool good = std::none_of(bad.begin(), bad.end(), [](const BadRow& b) { return b.found; });
    if (good) {
#pragma omp for schedule(static)
      for (std::ptrdiff_t hh = 0; hh < static_cast<std::ptrdiff_t>(h); ++hh) {
        const auto head = static_cast<std::size_t>(hh);
        // S_t = S_{t-1} + phi(k_t) v_t^T,  z_t = z_{t-1} + phi(k_t)
        apply_feature_map(k.data() + head * m, m, cfg.feature_map, 1.0f, phi_k);
        add_outer_product(phi_k, v.data() + head * d_v, m, d_v, state.s.data() + head * m * d_v,
                          state.z.data() + head * m);
      }
    }
  }
  return std::none_of(bad.begin(), bad.end(), [](const BadRow& b) { return b.found; });
}

// Tokens 0..n-1 per head (threads over heads) on `work`, a copy of the state: per token, the
// state's update and the readout in one pass over the rows of S.
void token_by_token(const Tensor3& q, const Tensor3& k, const Tensor3& v, const LinearAttentionConfig& cfg,
                    LinearAttentionState& work, Tensor3& o, std::vector<BadRow>& bad) {
  const std::size_t h = q.shape()[0], n = q.shape()[1], m = q.shape()[2], d_v = v.shape()[2];
  const auto scale = static_cast<float>(cfg.scale);
  const int threads = head_threads(h);
  std::vector<float> features(static_cast<std::size_t>(threads) * 2 * m);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (std::ptrdiff_t hh = 0; hh < static_cast<std::ptrdiff_t>(h); ++hh) {
    const auto head = static_cast<std::size_t>(hh);
    float* phi_q = features.data() + static_cast<std::size_t>(omp_get_thread_num()) * 2 * m;
    float* phi_k = phi_q + m;
    float* s = work.s.data() + head * m * d_v;
    float* z = work.z.data() + head * m;
    for (std::size_t t = 0; t < n && !bad[head].found; ++t) {
      const std::size_t row = head * n + t;
      apply_feature_map(q.data() + row * m, m, cfg.feature_map, scale, phi_q);
      apply_feature_map(k.data() + row * m, m, cfg.feature_map, 1.0f, phi_k);
      const float* v_t = v.data() + row * d_v;
      float* o_t = o.data() + row * d_v;
      // S_t = S_{t-1} + phi(k_t) v_t^T, z_t = z_{t-1} + phi(k_t); o_t = scale phi(q_t)^T S_t and the
      // normaliser scale phi(q_t)^T z_t (position t sees itself)
      add_outer_product(phi_k, v_t, m, d_v, s, z);
      weighted_row_sum(phi_q, s, m, d_v, o_t);
      const float denominator = dot(phi_q, z, m);
      normalise_rows(o_t, &denominator, 1, d_v, cfg.normalize, t, bad[head]);
    }
  }
}

}  // namespace

Tensor3 causal_linear_attention_recurrent(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                          const LinearAttentionConfig& cfg, LinearAttentionState& state) {
  const char* fn = "causal_linear_attention_recurrent";
  ref::validate_linear_attention_inputs(fn, q, k, v, cfg, /*same_length=*/true);
  // The reference's checks of the state, less the pass over S: every entry of S feeds an output
  // (o_e sums phi(q)_c S_ce over c, and inf or NaN stays non-finite in a sum and a product), so a
  // non-finite S shows in the outputs, checked anyway; the full check runs then, to name it. A
  // decode step reads S once instead of twice.
  ref::validate_linear_attention_state_shape(fn, state, q.shape()[0], q.shape()[2], v.shape()[2]);
  require_finite_max_abs(fn, "state.z", state.z);
  const std::size_t h = q.shape()[0], n = q.shape()[1], d_v = v.shape()[2];
  Tensor3 o = Tensor3::from_shape({h, n, d_v});
  std::vector<BadRow> bad(h);
  // One token reads the state and writes it only once its outputs are checked, so it needs no
  // copy; a longer input runs on a copy, committed when every output is good.
  if (n == 1) {
    if (decode_step(q, k, v, cfg, state, o, bad)) return o;
  } else {
    LinearAttentionState work = state;
    token_by_token(q, k, v, cfg, work, o, bad);
    if (std::none_of(bad.begin(), bad.end(), [](const BadRow& b) { return b.found; })) {
      state = std::move(work);
      return o;
    }
  }
  ref::validate_linear_attention_state(fn, state, q, v);  // throws when a non-finite state was the cause
  report_bad_rows(fn, cfg, bad);                          // throws
  return o;
}

Tensor3 causal_linear_attention_parallel(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                         const LinearAttentionConfig& cfg) {
  const char* fn = "causal_linear_attention_parallel";
  ref::validate_linear_attention_inputs(fn, q, k, v, cfg, /*same_length=*/true);
  const std::size_t h = q.shape()[0], n = q.shape()[1], m = q.shape()[2], d_v = v.shape()[2];
  const auto scale = static_cast<float>(cfg.scale);
  Tensor3 o = Tensor3::from_shape({h, n, d_v});
  std::vector<BadRow> bad(h);
  detail::SingleThreadedBlas single_threaded;
#pragma omp parallel for schedule(static) num_threads(head_threads(h))
  for (std::ptrdiff_t hh = 0; hh < static_cast<std::ptrdiff_t>(h); ++hh) {
    const auto head = static_cast<std::size_t>(hh);
    const float* v_head = v.data() + head * n * d_v;
    float* o_head = o.data() + head * n * d_v;
    const std::size_t block = std::min(n, kParallelBlockRows);
    std::vector<float> phi_q(n * m), phi_k(n * m), a(block * n), denominators(block);
    apply_feature_map(q.data() + head * n * m, n * m, cfg.feature_map, scale, phi_q.data());
    apply_feature_map(k.data() + head * n * m, n * m, cfg.feature_map, 1.0f, phi_k.data());
    for (std::size_t r0 = 0; r0 < n && !bad[head].found; r0 += block) {
      const std::size_t r1 = std::min(n, r0 + block), rows = r1 - r0;
      // A = scale phi(Q_{r0:r1}) phi(K_{0:r1})^T  [rows, r1]: keys past r1 are masked for every row
      detail::sgemm(rows, r1, m, 1.0f, phi_q.data() + r0 * m, m, phi_k.data(), m, true, 0.0f, a.data(), r1);
      // A_ij = 0 for j > i (M_ij = [j <= i]); the normaliser of row i is sum_j A_ij
      for (std::size_t i = 0; i < rows; ++i) {
        float* a_row = a.data() + i * r1;
        std::fill(a_row + r0 + i + 1, a_row + r1, 0.0f);
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (std::size_t j = 0; j <= r0 + i; ++j) sum += a_row[j];
        denominators[i] = sum;
      }
      // O_{r0:r1} = A V_{0:r1}
      detail::sgemm(rows, d_v, r1, 1.0f, a.data(), r1, v_head, d_v, false, 0.0f, o_head + r0 * d_v, d_v);
      normalise_rows(o_head + r0 * d_v, denominators.data(), rows, d_v, cfg.normalize, r0, bad[head]);
    }
  }
  report_bad_rows(fn, cfg, bad);
  return o;
}

Tensor3 causal_linear_attention_chunked(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                        const LinearAttentionConfig& cfg, std::size_t chunk_size,
                                        LinearAttentionState& state) {
  const char* fn = "causal_linear_attention_chunked";
  ref::validate_linear_attention_inputs(fn, q, k, v, cfg, /*same_length=*/true);
  ref::validate_linear_attention_state(fn, state, q, v);
  require(chunk_size >= 1, fn, "chunk_size (", chunk_size, ") must be at least 1");
  const std::size_t h = q.shape()[0], n = q.shape()[1], m = q.shape()[2], d_v = v.shape()[2];
  const std::size_t chunk = std::min(chunk_size, n);  // a chunk longer than the sequence is the sequence
  const auto scale = static_cast<float>(cfg.scale);
  Tensor3 o = Tensor3::from_shape({h, n, d_v});
  std::vector<BadRow> bad(h);
  LinearAttentionState next = state;  // committed only when every row is good
  detail::SingleThreadedBlas single_threaded;
#pragma omp parallel for schedule(static) num_threads(head_threads(h))
  for (std::ptrdiff_t hh = 0; hh < static_cast<std::ptrdiff_t>(h); ++hh) {
    const auto head = static_cast<std::size_t>(hh);
    // S_[c-1] and z_[c-1], the sums over every chunk before this one, updated in place
    float* s = next.s.data() + head * m * d_v;
    float* z = next.z.data() + head * m;
    std::vector<float> phi_q(chunk * m), phi_k(chunk * m), a(chunk * chunk), denominators(chunk);
    for (std::size_t start = 0; start < n && !bad[head].found; start += chunk) {
      const std::size_t rows = std::min(n, start + chunk) - start;
      const std::size_t first = head * n + start;  // the chunk's first row in q, k, v, o
      const float* v_c = v.data() + first * d_v;
      float* o_c = o.data() + first * d_v;
      apply_feature_map(q.data() + first * m, rows * m, cfg.feature_map, scale, phi_q.data());
      apply_feature_map(k.data() + first * m, rows * m, cfg.feature_map, 1.0f, phi_k.data());
      // inter-chunk: O_[c] = scale phi(Q_[c]) S_[c-1], normalisers scale phi(Q_[c]) z_[c-1]
      detail::sgemm(rows, d_v, m, 1.0f, phi_q.data(), m, s, d_v, false, 0.0f, o_c, d_v);
      for (std::size_t i = 0; i < rows; ++i) denominators[i] = dot(phi_q.data() + i * m, z, m);
      // intra-chunk: A = scale phi(Q_[c]) phi(K_[c])^T, A_ij = 0 for j > i, O_[c] += A V_[c]
      detail::sgemm(rows, rows, m, 1.0f, phi_q.data(), m, phi_k.data(), m, true, 0.0f, a.data(), rows);
      detail::mask_causal_and_add_row_sums(a.data(), rows, denominators.data());
      detail::sgemm(rows, d_v, rows, 1.0f, a.data(), rows, v_c, d_v, false, 1.0f, o_c, d_v);
      // the state: S_[c] = S_[c-1] + phi(K_[c])^T V_[c],  z_[c] = z_[c-1] + phi(K_[c])^T 1
      sgemm_transposed_a(m, d_v, rows, phi_k.data(), m, v_c, d_v, 1.0f, s, d_v);
      add_column_sums(phi_k.data(), rows, m, z);
      normalise_rows(o_c, denominators.data(), rows, d_v, cfg.normalize, start, bad[head]);
    }
  }
  report_bad_rows(fn, cfg, bad);
  state = std::move(next);
  return o;
}

}  // namespace tvlab::opt
