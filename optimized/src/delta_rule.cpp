#include "tvlab/opt/delta_rule.hpp"

#include <omp.h>
#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <sstream>
#include <string>
#include <vector>

#include "detail/blas.hpp"
#include "tvlab/core/error.hpp"
#include "tvlab/ref/delta_rule.hpp"

namespace tvlab::opt {
namespace {

using Batch = xsimd::batch<float>;

template <class T>
bool given(const T& tensor) {
  return tensor.size() != 0;
}

int head_threads(std::size_t heads) {
  return static_cast<int>(std::min<std::size_t>(heads, static_cast<std::size_t>(omp_get_max_threads())));
}

// What stopped a head, found inside the threads and reported after them (an exception cannot leave
// an OpenMP region), in the reference's order: zero rows of every head first (the reference finds
// them while preparing the inputs), then the first head whose state or output left float's range.
struct HeadFault {
  bool zero_row = false;
  const char* zero_row_name = "";  // "q" or "k"
  std::size_t zero_row_position = 0;
  bool out_of_range = false;
  const char* what = "";  // "state" or "output"
  std::size_t position = 0;
};

// sum_c x_c^2 in double, in eight independent partial sums: one running sum would wait for each
// addition before the next (a chain as long as the row), where eight lanes fill a SIMD register.
double sum_of_squares(const float* x, std::size_t n) {
  constexpr std::size_t kLanes = 8;
  double partial[kLanes] = {};
  std::size_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (std::size_t l = 0; l < kLanes; ++l) partial[l] += static_cast<double>(x[c + l]) * x[c + l];
  for (; c < n; ++c) partial[0] += static_cast<double>(x[c]) * x[c];
  double sum = 0.0;
  for (double p : partial) sum += p;
  return sum;
}

// The rows of q and k of one head as the recurrence uses them: q times the scale, both divided by
// their L2 norms (summed in double) when cfg asks. Returns false, with the fault recorded, at the
// first zero row (q before k at each position, as the reference checks them).
bool prepare_rows(const Tensor3& q, const Tensor3& k, std::size_t head, const DeltaRuleConfig& cfg, double scale,
                  float* q_out, float* k_out, HeadFault& fault) {
  const std::size_t n = q.shape()[1], d_k = q.shape()[2];
  for (std::size_t t = 0; t < n; ++t) {
    const float* rows[2] = {q.data() + (head * n + t) * d_k, k.data() + (head * n + t) * d_k};
    float* outs[2] = {q_out + t * d_k, k_out + t * d_k};
    for (int which = 0; which < 2; ++which) {
      double factor = which == 0 ? scale : 1.0;
      if (cfg.l2_normalize_qk) {
        const double sum_sq = sum_of_squares(rows[which], d_k);
        if (sum_sq == 0.0) {
          fault.zero_row = true;
          fault.zero_row_name = which == 0 ? "q" : "k";
          fault.zero_row_position = t;
          return false;
        }
        factor /= std::sqrt(sum_sq);
      }
      const auto f = static_cast<float>(factor);
#pragma omp simd
      for (std::size_t c = 0; c < d_k; ++c) outs[which][c] = f * rows[which][c];
    }
  }
  return true;
}

// The largest beta_t ||k_t||^2 of a head up to position `last`, in double from the inputs (the
// reference's measure of the delta rule's growth: the update's eigenvalue along k is 1 - beta ||k||^2).
double largest_beta_key_norm_sq(const Tensor3& k, const Tensor2& beta, const DeltaRuleConfig& cfg, std::size_t head,
                                std::size_t last) {
  const std::size_t d_k = k.shape()[2];
  double largest = 0.0;
  for (std::size_t t = 0; t <= last; ++t) {
    double norm_sq = 0.0;
    for (std::size_t c = 0; c < d_k; ++c) norm_sq += static_cast<double>(k(head, t, c)) * k(head, t, c);
    largest = std::max(largest, beta(head, t) * (cfg.l2_normalize_qk ? 1.0 : norm_sq));
  }
  return largest;
}

// Throws the reference's error for the first fault, if any: zero rows of every head, then ranges.
void report_faults(const char* fn, const std::vector<HeadFault>& faults, const Tensor3& k, const Tensor2& beta,
                   const DeltaRuleConfig& cfg) {
  for (std::size_t head = 0; head < faults.size(); ++head)
    if (faults[head].zero_row)
      fail(fn, faults[head].zero_row_name, " has a zero row at head ", head, ", position ",
           faults[head].zero_row_position, ": cfg.l2_normalize_qk cannot divide it by its norm 0");
  for (std::size_t head = 0; head < faults.size(); ++head) {
    const HeadFault& f = faults[head];
    if (!f.out_of_range) continue;
    std::ostringstream why;
    const double growth = largest_beta_key_norm_sq(k, beta, cfg, head, f.position);
    if (cfg.delta && growth > 2.0)
      why << "keys with beta ||k||^2 > 2 (here up to " << growth
          << ") make the delta rule unstable (the update I - beta k k^T has an eigenvalue below -1); keys of norm at "
             "most sqrt(2/beta) keep it bounded: normalise them (cfg.l2_normalize_qk)";
    else
      why << "scale q, k or v down";
    fail(fn, "the ", f.what, " of head ", head, " grew beyond float's range at position ", f.position, ": ", why.str());
  }
}

// The state of one head, S_0 as given or zeros, into s [d_k, ld] (columns d_v..ld zero).
void load_state(const Tensor3& initial_state, std::size_t head, std::size_t d_k, std::size_t d_v, std::size_t ld,
                float* s) {
  std::fill(s, s + d_k * ld, 0.0f);
  if (given(initial_state))
    for (std::size_t c = 0; c < d_k; ++c)
      std::copy_n(initial_state.data() + (head * d_k + c) * d_v, d_v, s + c * ld);
}

void store_state(const float* s, std::size_t head, std::size_t d_k, std::size_t d_v, std::size_t ld, Tensor3& state) {
  for (std::size_t c = 0; c < d_k; ++c) std::copy_n(s + c * ld, d_v, state.data() + (head * d_k + c) * d_v);
}

// 0 for `count` finite floats, NaN otherwise (x - x is 0 for a finite x and NaN for inf or NaN).
float non_finite_sum(const float* x, std::size_t count) {
  float zeros = 0.0f;
#pragma omp simd reduction(+ : zeros)
  for (std::size_t i = 0; i < count; ++i) zeros += x[i] - x[i];
  return zeros;
}

// x_i <- e^{x_i} for `count` floats (xsimd's exp: the compiler does not vectorise std::exp).
void exp_in_place(float* x, std::size_t count) {
  const std::size_t vec_end = count - count % Batch::size;
  for (std::size_t i = 0; i < vec_end; i += Batch::size) xsimd::exp(Batch::load_unaligned(x + i)).store_unaligned(x + i);
  for (std::size_t i = vec_end; i < count; ++i) x[i] = std::exp(x[i]);
}

// ------------------------------------------------------------------ the recurrence

// The two passes of a token over columns [e0, e0 + N lanes) of S [d_k, ld], N batches at a time,
// their partial sums in registers across the d_k rows (accumulating in memory would chain each
// row's FMA to the previous row's store).

// Decay and predict: row c of S times decay[c] (written back; no decay when null), and
// p = S~^T key summed from the same values.
template <std::size_t N>
void decay_and_predict(float* s, std::size_t ld, std::size_t d_k, std::size_t e0, const float* decay,
                       const float* key, float* p) {
  Batch acc[N];
  for (std::size_t b = 0; b < N; ++b) acc[b] = Batch(0.0f);
  for (std::size_t c = 0; c < d_k; ++c) {
    float* row = s + c * ld + e0;
    const Batch k_c(key[c]);
    for (std::size_t b = 0; b < N; ++b) {
      Batch r = Batch::load_unaligned(row + b * Batch::size);
      if (decay) {
        r *= Batch(decay[c]);
        r.store_unaligned(row + b * Batch::size);
      }
      acc[b] = xsimd::fma(k_c, r, acc[b]);
    }
  }
  for (std::size_t b = 0; b < N; ++b) acc[b].store_unaligned(p + e0 + b * Batch::size);
}

// Write and read: row c of S times decay[c] (when not null) plus key[c] u, written back, and
// o = S_t^T query summed from the same values; `finite` gathers row - row (0 while S is finite).
template <std::size_t N>
void write_and_read(float* s, std::size_t ld, std::size_t d_k, std::size_t e0, const float* decay, const float* key,
                    const float* u, const float* query, float* o, Batch& finite) {
  Batch acc[N], u_b[N];
  for (std::size_t b = 0; b < N; ++b) acc[b] = Batch(0.0f), u_b[b] = Batch::load_unaligned(u + e0 + b * Batch::size);
  for (std::size_t c = 0; c < d_k; ++c) {
    float* row = s + c * ld + e0;
    const Batch k_c(key[c]), q_c(query[c]);
    for (std::size_t b = 0; b < N; ++b) {
      Batch r = Batch::load_unaligned(row + b * Batch::size);
      if (decay) r *= Batch(decay[c]);
      r = xsimd::fma(k_c, u_b[b], r);
      r.store_unaligned(row + b * Batch::size);
      acc[b] = xsimd::fma(q_c, r, acc[b]);
      finite += r - r;
    }
  }
  for (std::size_t b = 0; b < N; ++b) acc[b].store_unaligned(o + e0 + b * Batch::size);
}

// Runs `pass<N>` over every column block of a row of ld lanes: blocks of 4 batches, then the rest.
template <class Pass>
void over_column_blocks(std::size_t ld, Pass&& pass) {
  std::size_t e0 = 0;
  for (; e0 + 4 * Batch::size <= ld; e0 += 4 * Batch::size) pass(std::integral_constant<std::size_t, 4>{}, e0);
  switch ((ld - e0) / Batch::size) {
    case 3: pass(std::integral_constant<std::size_t, 3>{}, e0); break;
    case 2: pass(std::integral_constant<std::size_t, 2>{}, e0); break;
    case 1: pass(std::integral_constant<std::size_t, 1>{}, e0); break;
    default: break;
  }
}

}  // namespace

DeltaRuleOutput delta_rule_recurrent(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor2& beta,
                                     const DeltaRuleGate& gate, const DeltaRuleConfig& cfg,
                                     const Tensor3& initial_state) {
  const char* fn = "delta_rule_recurrent";
  ref::validate_delta_rule(fn, q, k, v, beta, gate, cfg, initial_state);
  const std::size_t h = q.shape()[0], n = q.shape()[1], d_k = q.shape()[2], d_v = v.shape()[2];
  const double scale = cfg.scale.value_or(1.0 / std::sqrt(static_cast<double>(d_k)));
  // S's rows padded to whole SIMD batches: the padded columns of v, u and S stay 0
  const std::size_t ld = (d_v + Batch::size - 1) / Batch::size * Batch::size;
  DeltaRuleOutput out{Tensor3::from_shape({h, n, d_v}), Tensor3::from_shape({h, d_k, d_v})};
  std::vector<HeadFault> faults(h);
#pragma omp parallel for schedule(static) num_threads(head_threads(h))
  for (std::ptrdiff_t hh = 0; hh < static_cast<std::ptrdiff_t>(h); ++hh) {
    const auto head = static_cast<std::size_t>(hh);
    HeadFault& fault = faults[head];
    std::vector<float> q_rows(n * d_k), k_rows(n * d_k);
    if (!prepare_rows(q, k, head, cfg, scale, q_rows.data(), k_rows.data(), fault)) continue;
    std::vector<float> s(d_k * ld), decay(d_k), u(ld, 0.0f), o(ld);
    load_state(initial_state, head, d_k, d_v, ld, s.data());
    for (std::size_t t = 0; t < n; ++t) {
      const float* q_t = q_rows.data() + t * d_k;
      const float* k_t = k_rows.data() + t * d_k;
      const float* v_t = v.data() + (head * n + t) * d_v;
      const auto beta_t = static_cast<float>(beta(head, t));
      // D_t = diag(e^{g_t}): one factor per row of S (the scalar gate's in every row)
      const float* decay_t = nullptr;
      if (given(gate.scalar)) std::fill(decay.begin(), decay.end(), std::exp(gate.scalar(head, t)));
      if (given(gate.per_channel)) {
        std::copy_n(gate.per_channel.data() + (head * n + t) * d_k, d_k, decay.data());
        exp_in_place(decay.data(), d_k);
      }
      if (given(gate.scalar) || given(gate.per_channel)) decay_t = decay.data();
      if (cfg.delta) {
        // decay and predict: S~ = D_t S_{t-1}, p = S~^T k_t (into u)
        over_column_blocks(ld, [&](auto blocks, std::size_t e0) {
          decay_and_predict<decltype(blocks)::value>(s.data(), ld, d_k, e0, decay_t, k_t, u.data());
        });
        // u_t = beta_t (v_t - p)
#pragma omp simd
        for (std::size_t e = 0; e < d_v; ++e) u[e] = beta_t * (v_t[e] - u[e]);
        decay_t = nullptr;  // applied
      } else {
        // u_t = beta_t v_t (the decay joins the write below)
#pragma omp simd
        for (std::size_t e = 0; e < d_v; ++e) u[e] = beta_t * v_t[e];
      }
      // write and read: S_t = S~ + k_t u_t^T, o_t = S_t^T (scale q_t)
      Batch finite(0.0f);
      over_column_blocks(ld, [&](auto blocks, std::size_t e0) {
        write_and_read<decltype(blocks)::value>(s.data(), ld, d_k, e0, decay_t, k_t, u.data(), q_t, o.data(), finite);
      });
      const bool state_bad = xsimd::hadd(finite) != 0.0f, output_bad = non_finite_sum(o.data(), d_v) != 0.0f;
      if (state_bad || output_bad) {
        fault = {false, "", 0, true, state_bad ? "state" : "output", t};
        break;
      }
      std::copy_n(o.data(), d_v, out.o.data() + (head * n + t) * d_v);
    }
    store_state(s.data(), head, d_k, d_v, ld, out.state);
  }
  report_faults(fn, faults, k, beta, cfg);
  return out;
}

namespace {

// ------------------------------------------------------------------ the chunked form

// C[m, n] = A^T B + beta C, A stored [k, m], B [k, n], row-major: the state's update (K o e^{G_L - G})^T U.
void sgemm_transposed_a(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda, const float* b,
                        std::size_t ldb, float beta, float* c, std::size_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// One head's buffers for chunks of up to C positions.
struct ChunkBuffers {
  std::vector<double> G;                  // [C, w]: cumulative log gates (w = 1 scalar or none, d_k per channel)
  std::vector<float> decayed_k, decayed_q, k_to_end;  // [C, d_k]
  std::vector<float> A, P;                // [C, C]
  std::vector<float> U;                   // [C, d_v]
  std::vector<float> pair;                // [d_k]: one pair's decay factors, or a row's
  std::vector<float> to_start, to_end;    // [C, w]: e^{G_i} and e^{G_L - G_i}
  ChunkBuffers(std::size_t C, std::size_t d_k, std::size_t d_v, std::size_t w)
      : G(C * w, 0.0), decayed_k(C * d_k), decayed_q(C * d_k), k_to_end(C * d_k), A(C * C), P(C * C), U(C * d_v),
        pair(std::max(C, d_k)), to_start(C * w), to_end(C * w) {}
};

// Within a chunk of L positions: A_ij = sum_c k_i[c] k_j[c] e^{G_i[c] - G_j[c]} for j < i (0 on and
// above the diagonal) and P_ij = sum_c q_i[c] k_j[c] e^{G_i[c] - G_j[c]} for j <= i (0 above).
// `w` = 0: no gate; 1: scalar (one exponent per pair, applied after the SGEMMs); d_k: per channel.
void pair_products(std::size_t L, std::size_t d_k, std::size_t w, const float* qc, const float* kc, ChunkBuffers& b) {
  float* A = b.A.data();
  float* P = b.P.data();
  if (w <= 1) {
    // K K^T and Q K^T  [L, L]
    detail::sgemm(L, L, d_k, 1.0f, kc, d_k, kc, d_k, true, 0.0f, A, L);
    detail::sgemm(L, L, d_k, 1.0f, qc, d_k, kc, d_k, true, 0.0f, P, L);
    for (std::size_t i = 0; i < L; ++i) {
      float* factor = b.pair.data();  // e^{G_i - G_j}, j <= i: differences in double, each <= 0
      for (std::size_t j = 0; j <= i; ++j) factor[j] = w == 0 ? 0.0f : static_cast<float>(b.G[i] - b.G[j]);
      if (w == 1) exp_in_place(factor, i + 1);
      else std::fill(factor, factor + i + 1, 1.0f);
      float* a_row = A + i * L;
      float* p_row = P + i * L;
#pragma omp simd
      for (std::size_t j = 0; j <= i; ++j) a_row[j] *= factor[j], p_row[j] *= factor[j];
      a_row[i] = 0.0f;
      std::fill(a_row + i + 1, a_row + L, 0.0f);
      std::fill(p_row + i + 1, p_row + L, 0.0f);
    }
    return;
  }
  // per channel: a loop over the pairs, the factors e^{G_i[c] - G_j[c]} <= 1 per channel
  std::fill(A, A + L * L, 0.0f);
  std::fill(P, P + L * L, 0.0f);
  float* weighted_key = b.pair.data();  // k_j[c] e^{G_i[c] - G_j[c]}
  for (std::size_t i = 0; i < L; ++i) {
    const double* G_i = b.G.data() + i * d_k;
    for (std::size_t j = 0; j <= i; ++j) {
      const double* G_j = b.G.data() + j * d_k;
      for (std::size_t c = 0; c < d_k; ++c) weighted_key[c] = static_cast<float>(G_i[c] - G_j[c]);
      exp_in_place(weighted_key, d_k);
      float a = 0.0f, p = 0.0f;
#pragma omp simd reduction(+ : a, p)
      for (std::size_t c = 0; c < d_k; ++c) {
        const float wk = weighted_key[c] * kc[j * d_k + c];
        a += kc[i * d_k + c] * wk;
        p += qc[i * d_k + c] * wk;
      }
      if (j < i) A[i * L + j] = a;
      P[i * L + j] = p;
    }
  }
}

}  // namespace

DeltaRuleOutput delta_rule_chunked(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor2& beta,
                                   const DeltaRuleGate& gate, const DeltaRuleConfig& cfg, std::size_t chunk_size,
                                   const Tensor3& initial_state) {
  const char* fn = "delta_rule_chunked";
  require(chunk_size >= 1, fn, "chunk_size (", chunk_size, ") must be at least 1");
  ref::validate_delta_rule(fn, q, k, v, beta, gate, cfg, initial_state);
  const std::size_t h = q.shape()[0], n = q.shape()[1], d_k = q.shape()[2], d_v = v.shape()[2];
  const double scale = cfg.scale.value_or(1.0 / std::sqrt(static_cast<double>(d_k)));
  const std::size_t C = std::min(chunk_size, n);  // a chunk longer than the sequence is the sequence
  const std::size_t w = given(gate.scalar) ? 1 : given(gate.per_channel) ? d_k : 0;  // log gates per position
  DeltaRuleOutput out{Tensor3::from_shape({h, n, d_v}), Tensor3::from_shape({h, d_k, d_v})};
  std::vector<HeadFault> faults(h);
  detail::SingleThreadedBlas single_threaded;  // the threads are OpenMP's, one head each
#pragma omp parallel for schedule(static) num_threads(head_threads(h))
  for (std::ptrdiff_t hh = 0; hh < static_cast<std::ptrdiff_t>(h); ++hh) {
    const auto head = static_cast<std::size_t>(hh);
    HeadFault& fault = faults[head];
    std::vector<float> q_rows(n * d_k), k_rows(n * d_k);
    if (!prepare_rows(q, k, head, cfg, scale, q_rows.data(), k_rows.data(), fault)) continue;
    ChunkBuffers b(C, d_k, d_v, std::max<std::size_t>(w, 1));
    float* s = out.state.data() + head * d_k * d_v;  // S_0 of the current chunk, updated in place
    load_state(initial_state, head, d_k, d_v, d_v, s);
    for (std::size_t start = 0; start < n; start += C) {
      const std::size_t L = std::min(C, n - start), last = start + L - 1;
      const float* qc = q_rows.data() + start * d_k;
      const float* kc = k_rows.data() + start * d_k;
      const float* vc = v.data() + (head * n + start) * d_v;
      float* oc = out.o.data() + (head * n + start) * d_v;
      // G_i = sum_{s <= i} g_s from the chunk's start, in double (differences of large sums stay exact)
      const float* g = w == 1 ? gate.scalar.data() + head * n + start
                              : w > 1 ? gate.per_channel.data() + (head * n + start) * d_k : nullptr;
      for (std::size_t i = 0; i < L && w > 0; ++i)
        for (std::size_t c = 0; c < w; ++c) b.G[i * w + c] = (i > 0 ? b.G[(i - 1) * w + c] : 0.0) + g[i * w + c];
      // K o e^{G}, Q o e^{G} and K o e^{G_L - G}: every factor at most 1, one per row (scalar gate, or
      // no gate: G = 0) or per entry (per channel); the exponents as float differences taken in double
      const std::size_t wg = std::max<std::size_t>(w, 1);
      const double* G_L = b.G.data() + (L - 1) * wg;
      for (std::size_t i = 0; i < L; ++i)
        for (std::size_t c = 0; c < wg; ++c) {
          b.to_start[i * wg + c] = static_cast<float>(b.G[i * wg + c]);
          b.to_end[i * wg + c] = static_cast<float>(G_L[c] - b.G[i * wg + c]);
        }
      exp_in_place(b.to_start.data(), L * wg);
      exp_in_place(b.to_end.data(), L * wg);
      for (std::size_t i = 0; i < L; ++i) {
        const float* start_i = b.to_start.data() + i * wg;
        const float* end_i = b.to_end.data() + i * wg;
        const std::size_t step = wg == 1 ? 0 : 1;  // a scalar factor repeated in every channel
#pragma omp simd
        for (std::size_t c = 0; c < d_k; ++c) {
          b.decayed_k[i * d_k + c] = start_i[c * step] * kc[i * d_k + c];
          b.decayed_q[i * d_k + c] = start_i[c * step] * qc[i * d_k + c];
          b.k_to_end[i * d_k + c] = end_i[c * step] * kc[i * d_k + c];
        }
      }
      pair_products(L, d_k, w, qc, kc, b);
      // W = diag(beta) (V - (K o e^G) S_0) (diag(beta) V without the delta rule)
      std::copy_n(vc, L * d_v, b.U.data());
      if (cfg.delta) detail::sgemm(L, d_v, d_k, -1.0f, b.decayed_k.data(), d_k, s, d_v, false, 1.0f, b.U.data(), d_v);
      for (std::size_t i = 0; i < L; ++i) {
        const auto beta_i = static_cast<float>(beta(head, start + i));
        float* row = b.U.data() + i * d_v;
#pragma omp simd
        for (std::size_t e = 0; e < d_v; ++e) row[e] *= beta_i;
      }
      // U = (I + StrictLower(diag(beta) A))^{-1} W: the unit lower-triangular solve (the diagonal of
      // A is 0 and strsm with CblasUnit does not read it)
      if (cfg.delta && L > 1) {
        for (std::size_t i = 0; i < L; ++i) {
          const auto beta_i = static_cast<float>(beta(head, start + i));
          for (std::size_t j = 0; j < i; ++j) b.A[i * L + j] *= beta_i;
        }
        cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, static_cast<int>(L),
                    static_cast<int>(d_v), 1.0f, b.A.data(), static_cast<int>(L), b.U.data(), static_cast<int>(d_v));
      }
      // O = (Q o e^G) S_0 + P U
      detail::sgemm(L, d_v, d_k, 1.0f, b.decayed_q.data(), d_k, s, d_v, false, 0.0f, oc, d_v);
      detail::sgemm(L, d_v, L, 1.0f, b.P.data(), L, b.U.data(), d_v, false, 1.0f, oc, d_v);
      // S_L = diag(e^{G_L}) S_0 + (K o e^{G_L - G})^T U: the next chunk's S_0
      if (w > 0)
        for (std::size_t c = 0; c < d_k; ++c) {
          const auto decay = static_cast<float>(std::exp(G_L[w == 1 ? 0 : c]));
          float* row = s + c * d_v;
#pragma omp simd
          for (std::size_t e = 0; e < d_v; ++e) row[e] *= decay;
        }
      sgemm_transposed_a(d_k, d_v, L, b.k_to_end.data(), d_k, b.U.data(), d_v, 1.0f, s, d_v);
      // the chunk's outputs row by row, then its state (the reference's order)
      for (std::size_t i = 0; i < L && !fault.out_of_range; ++i)
        if (non_finite_sum(oc + i * d_v, d_v) != 0.0f) fault = {false, "", 0, true, "output", start + i};
      if (!fault.out_of_range && non_finite_sum(s, d_k * d_v) != 0.0f) fault = {false, "", 0, true, "state", last};
      if (fault.out_of_range) break;
    }
  }
  report_faults(fn, faults, k, beta, cfg);
  return out;
}

}  // namespace tvlab::opt
