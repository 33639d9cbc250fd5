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
// an OpenMP region): an input the reference rejects (a zero row to normalise, or a q, k or v that
// is not finite), or the position where the state or an output left float's range.
struct HeadFault {
  bool bad_input = false;
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

// 0 for `count` finite floats, NaN otherwise (x - x is 0 for a finite x and NaN for inf or NaN).
float non_finite_sum(const float* x, std::size_t count) {
  float zeros = 0.0f;
#pragma omp simd reduction(+ : zeros)
  for (std::size_t i = 0; i < count; ++i) zeros += x[i] - x[i];
  return zeros;
}

// Rows t0 .. t0 + count - 1 of q and k of one head as the recurrence uses them: q times the scale,
// both divided by their L2 norms (summed in double) when cfg asks, into q_out and k_out (rows of
// d_k). Returns false, with the fault recorded, at a zero row or a value that is not finite.
bool prepare_rows(const Tensor3& q, const Tensor3& k, std::size_t head, const DeltaRuleConfig& cfg, double scale,
                  std::size_t t0, std::size_t count, float* q_out, float* k_out, HeadFault& fault) {
  const std::size_t n = q.shape()[1], d_k = q.shape()[2];
  for (std::size_t t = t0; t < t0 + count; ++t) {
    const float* rows[2] = {q.data() + (head * n + t) * d_k, k.data() + (head * n + t) * d_k};
    float* outs[2] = {q_out + (t - t0) * d_k, k_out + (t - t0) * d_k};
    for (int which = 0; which < 2; ++which) {
      double factor = which == 0 ? scale : 1.0;
      if (cfg.l2_normalize_qk) {
        const double sum_sq = sum_of_squares(rows[which], d_k);
        if (sum_sq == 0.0 || !std::isfinite(sum_sq)) {
          fault.bad_input = true;
          return false;
        }
        factor /= std::sqrt(sum_sq);
      }
      const auto f = static_cast<float>(factor);
#pragma omp simd
      for (std::size_t c = 0; c < d_k; ++c) outs[which][c] = f * rows[which][c];
    }
  }
  // without the norms, the scaled rows show a value that is not finite (f > 0 is finite)
  if (!cfg.l2_normalize_qk && non_finite_sum(q_out, count * d_k) + non_finite_sum(k_out, count * d_k) != 0.0f) {
    fault.bad_input = true;
    return false;
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

// Throws the reference's error when a head stopped, in the reference's order: its input checks
// (with the scans of q, k and v, which the chunked form leaves to its reading of them), then the
// first zero row to normalise in (head, position) order, q before k, then the first head whose
// state or output left float's range. The error path reads the inputs again; the fast path does not.
void report_faults(const char* fn, const std::vector<HeadFault>& faults, const Tensor3& q, const Tensor3& k,
                   const Tensor3& v, const Tensor2& beta, const DeltaRuleGate& gate, const DeltaRuleConfig& cfg,
                   const Tensor3& initial_state) {
  if (std::none_of(faults.begin(), faults.end(), [](const HeadFault& f) { return f.bad_input || f.out_of_range; }))
    return;
  ref::validate_delta_rule(fn, q, k, v, beta, gate, cfg, initial_state);
  const std::size_t n = q.shape()[1], d_k = q.shape()[2];
  if (cfg.l2_normalize_qk)
    for (std::size_t head = 0; head < faults.size(); ++head)
      for (std::size_t t = 0; t < n; ++t)
        for (const auto& [name, x] : {std::pair<const char*, const Tensor3*>{"q", &q}, {"k", &k}})
          if (sum_of_squares(x->data() + (head * n + t) * d_k, d_k) == 0.0)
            fail(fn, name, " has a zero row at head ", head, ", position ", t,
                 ": cfg.l2_normalize_qk cannot divide it by its norm 0");
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
    if (!prepare_rows(q, k, head, cfg, scale, 0, n, q_rows.data(), k_rows.data(), fault)) continue;
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
        fault = {false, true, state_bad ? "state" : "output", t};
        break;
      }
      std::copy_n(o.data(), d_v, out.o.data() + (head * n + t) * d_v);
    }
    store_state(s.data(), head, d_k, d_v, ld, out.state);
  }
  report_faults(fn, faults, q, k, v, beta, gate, cfg, initial_state);
  return out;
}

namespace {

// ------------------------------------------------------------------ the chunked form

// One head's buffers for chunks of up to C positions, laid out so that each SGEMM reads and writes
// whole blocks (one call on 2L or L + d_k rows runs faster than two or three calls on blocks of L):
//   rows    [K; Q]                        [2C, d_k]  the chunk's k and q as the recurrence uses them
//   decayed [K o e^G; Q o e^G]            [2C, d_k]
//   pairs   [A^T | P^T | K o e^{G_L - G}]  [C, 2C + d_k], rows of 2L + d_k entries
//   Z       [(K o e^G) S_0; O; S]         [2C + d_k, d_v], S_0 then S_L in the last d_k rows
// A and P are stored transposed so that the block [P^T | K o e^{G_L - G}], row j built from
// position j alone, is the transpose of [P; (K o e^{G_L - G})^T], the left factor of the state's
// update. For a chunk of L <= C positions the first two blocks of Z start at row 2C - 2L, so that
// O sits right above S whatever L is.
struct ChunkBuffers {
  std::vector<float> rows, decayed, pairs, T, W, U, Z;
  std::vector<double> G;                // [C, w]: cumulative log gates
  std::vector<float> to_start, to_end;  // [C, w]: e^{G_i} and e^{G_L - G_i}
  std::vector<float> factor;            // [max(C, d_k)]: one row's pair factors
  ChunkBuffers(std::size_t C, std::size_t d_k, std::size_t d_v, std::size_t w)
      : rows(2 * C * d_k), decayed(2 * C * d_k), pairs(C * (2 * C + d_k)), T(C * C), W(C * d_v), U(C * d_v),
        Z((2 * C + d_k) * d_v), G(C * w, 0.0), to_start(C * w), to_end(C * w), factor(std::max(C, d_k)) {}
};

// A^T and P^T into the first 2L entries of pairs' rows (row length ld): for i > j,
// A_ij = sum_c k_i[c] k_j[c] e^{G_i[c] - G_j[c]}, and for i >= j, P_ij = sum_c q_i[c] k_j[c] e^{G_i[c] - G_j[c]};
// 0 elsewhere. `w` = 0: no gate; 1: scalar (one exponent per pair, applied after one SGEMM
// K [K; Q]^T); d_k: per channel (a loop over the pairs, the factors e^{G_i[c] - G_j[c]} <= 1 per channel).
void pair_products(std::size_t L, std::size_t d_k, std::size_t w, std::size_t ld, ChunkBuffers& b) {
  const float* kc = b.rows.data();
  const float* qc = kc + L * d_k;
  float* pairs = b.pairs.data();
  if (w <= 1) {
    // row j: [k_j . k_i for every i | k_j . q_i for every i]
    detail::sgemm(L, 2 * L, d_k, 1.0f, kc, d_k, kc, d_k, true, 0.0f, pairs, ld);
    for (std::size_t j = 0; j < L; ++j) {
      float* factor = b.factor.data();  // e^{G_i - G_j}, i >= j: differences in double, each <= 0
      if (w == 1) {
        for (std::size_t i = j; i < L; ++i) factor[i] = static_cast<float>(b.G[i] - b.G[j]);
        exp_in_place(factor + j, L - j);
      } else {
        std::fill(factor + j, factor + L, 1.0f);
      }
      float* a_t = pairs + j * ld;  // column j of A
      float* p_t = a_t + L;         // column j of P
      std::fill(a_t, a_t + j + 1, 0.0f);
      std::fill(p_t, p_t + j, 0.0f);
#pragma omp simd
      for (std::size_t i = j; i < L; ++i) a_t[i] *= factor[i], p_t[i] *= factor[i];
      a_t[j] = 0.0f;
    }
    return;
  }
  for (std::size_t j = 0; j < L; ++j) std::fill(pairs + j * ld, pairs + j * ld + 2 * L, 0.0f);
  float* weighted_key = b.factor.data();  // k_j[c] e^{G_i[c] - G_j[c]}
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
      if (j < i) pairs[j * ld + i] = a;
      pairs[j * ld + L + i] = p;
    }
  }
}

// T = (I + B)^{-1} for B = diag(beta) StrictLower(A) [L, L], A given transposed (row length ld),
// by forward substitution: row i of (I + B) T = I reads T_i = e_i - sum_{j < i} B_ij T_j, and row
// j of T is 0 right of column j. L^3 / 6 multiply-adds per chunk, independent of the state (the
// UT transform's T).
void invert_unit_lower(std::size_t L, const float* a_transposed, std::size_t ld, const float* beta, float* T) {
  for (std::size_t i = 0; i < L; ++i) {
    float* t_i = T + i * L;
    std::fill(t_i, t_i + L, 0.0f);
    t_i[i] = 1.0f;
    for (std::size_t j = 0; j < i; ++j) {
      const float b_ij = beta[i] * a_transposed[j * ld + i];
      const float* t_j = T + j * L;
#pragma omp simd
      for (std::size_t m = 0; m <= j; ++m) t_i[m] -= b_ij * t_j[m];
    }
  }
}

// out[c] = factors[c] x[c] for d_k channels, or factors[0] x[c] when there is one factor (wg = 1):
// a row times its decay, per channel or scalar.
void scale_row(float* out, const float* x, const float* factors, std::size_t wg, std::size_t d_k) {
  if (wg == 1) {
    const float f = factors[0];
#pragma omp simd
    for (std::size_t c = 0; c < d_k; ++c) out[c] = f * x[c];
  } else {
#pragma omp simd
    for (std::size_t c = 0; c < d_k; ++c) out[c] = factors[c] * x[c];
  }
}

// Asks for `count` floats from x into the cache, one request per 64-byte line.
void prefetch(const float* x, std::size_t count) {
  constexpr std::size_t kLine = 64 / sizeof(float);
  for (std::size_t i = 0; i < count; i += kLine) __builtin_prefetch(x + i);
}

// C[m, n] = A^T B + beta C, A stored [k, m], B [k, n], row-major.
void sgemm_transposed_a(std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda, const float* b,
                        std::size_t ldb, float beta, float* c, std::size_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

}  // namespace

DeltaRuleOutput delta_rule_chunked(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor2& beta,
                                   const DeltaRuleGate& gate, const DeltaRuleConfig& cfg, std::size_t chunk_size,
                                   const Tensor3& initial_state) {
  const char* fn = "delta_rule_chunked";
  require(chunk_size >= 1, fn, "chunk_size (", chunk_size, ") must be at least 1");
  // q, k and v are checked as the chunks read them; a fault brings the reference's full checks
  ref::validate_delta_rule(fn, q, k, v, beta, gate, cfg, initial_state, /*scan_qkv=*/false);
  const std::size_t h = q.shape()[0], n = q.shape()[1], d_k = q.shape()[2], d_v = v.shape()[2];
  const double scale = cfg.scale.value_or(1.0 / std::sqrt(static_cast<double>(d_k)));
  const std::size_t C = std::min(chunk_size, n);  // a chunk longer than the sequence is the sequence
  const std::size_t w = given(gate.scalar) ? 1 : given(gate.per_channel) ? d_k : 0;  // log gates per position
  const std::size_t wg = std::max<std::size_t>(w, 1);  // G's row length (zeros without a gate)
  DeltaRuleOutput out{Tensor3::from_shape({h, n, d_v}), Tensor3::from_shape({h, d_k, d_v})};
  std::vector<HeadFault> faults(h);
  detail::SingleThreadedBlas single_threaded;  // the threads are OpenMP's, one head each
#pragma omp parallel for schedule(static) num_threads(head_threads(h))
  for (std::ptrdiff_t hh = 0; hh < static_cast<std::ptrdiff_t>(h); ++hh) {
    const auto head = static_cast<std::size_t>(hh);
    HeadFault& fault = faults[head];
    ChunkBuffers b(C, d_k, d_v, wg);
    float* S = b.Z.data() + 2 * C * d_v;  // S_0 of the current chunk, updated in place
    load_state(initial_state, head, d_k, d_v, d_v, S);
    for (std::size_t start = 0; start < n; start += C) {
      const std::size_t L = std::min(C, n - start), last = start + L - 1, ld = 2 * L + d_k;
      float* Z = b.Z.data() + (2 * C - 2 * L) * d_v;  // [(K o e^G) S_0; O; S]
      float* O = Z + L * d_v;
      const float* vc = v.data() + (head * n + start) * d_v;
      const float* beta_c = beta.data() + head * n + start;
      // the next chunk's q, k and v on their way to the cache while this one computes (read once
      // each, they would otherwise arrive from memory only when first touched)
      if (start + L < n) {
        const std::size_t next = std::min(C, n - start - L);
        prefetch(q.data() + (head * n + start + L) * d_k, next * d_k);
        prefetch(k.data() + (head * n + start + L) * d_k, next * d_k);
        prefetch(vc + L * d_v, next * d_v);
      }
      if (!prepare_rows(q, k, head, cfg, scale, start, L, b.rows.data() + L * d_k, b.rows.data(), fault)) break;
      if (non_finite_sum(vc, L * d_v) != 0.0f) {
        fault.bad_input = true;
        break;
      }
      // G_i = sum_{s <= i} g_s from the chunk's start, in double (differences of large sums stay exact)
      const float* g = w == 1 ? gate.scalar.data() + head * n + start
                              : w > 1 ? gate.per_channel.data() + (head * n + start) * d_k : nullptr;
      for (std::size_t i = 0; i < L && w > 0; ++i)
        for (std::size_t c = 0; c < w; ++c) b.G[i * w + c] = (i > 0 ? b.G[(i - 1) * w + c] : 0.0) + g[i * w + c];
      // e^{G_i} and e^{G_L - G_i}, every factor at most 1, one per row (scalar gate, or no gate:
      // G = 0) or per entry (per channel); the exponents as float differences taken in double
      const double* G_L = b.G.data() + (L - 1) * wg;
      for (std::size_t i = 0; i < L; ++i)
        for (std::size_t c = 0; c < wg; ++c) {
          b.to_start[i * wg + c] = static_cast<float>(b.G[i * wg + c]);
          b.to_end[i * wg + c] = static_cast<float>(G_L[c] - b.G[i * wg + c]);
        }
      exp_in_place(b.to_start.data(), L * wg);
      exp_in_place(b.to_end.data(), L * wg);
      // [K o e^G; Q o e^G], and K o e^{G_L - G} into the last d_k entries of pairs' rows
      for (std::size_t r = 0; r < 2 * L; ++r)  // rows of [K; Q]: position r mod L
        scale_row(b.decayed.data() + r * d_k, b.rows.data() + r * d_k, b.to_start.data() + (r % L) * wg, wg, d_k);
      for (std::size_t j = 0; j < L; ++j)
        scale_row(b.pairs.data() + j * ld + 2 * L, b.rows.data() + j * d_k, b.to_end.data() + j * wg, wg, d_k);
      pair_products(L, d_k, w, ld, b);
      // [(K o e^G) S_0; (Q o e^G) S_0] in one SGEMM (only the second block without the delta rule)
      if (cfg.delta)
        detail::sgemm(2 * L, d_v, d_k, 1.0f, b.decayed.data(), d_k, S, d_v, false, 0.0f, Z, d_v);
      else
        detail::sgemm(L, d_v, d_k, 1.0f, b.decayed.data() + L * d_k, d_k, S, d_v, false, 0.0f, O, d_v);
      // W = diag(beta) (V - (K o e^G) S_0) (diag(beta) V without the delta rule)
      for (std::size_t i = 0; i < L; ++i) {
        const float beta_i = beta_c[i];
        const float* v_i = vc + i * d_v;
        const float* predicted = Z + i * d_v;
        float* w_i = b.W.data() + i * d_v;
        if (cfg.delta) {
#pragma omp simd
          for (std::size_t e = 0; e < d_v; ++e) w_i[e] = beta_i * (v_i[e] - predicted[e]);
        } else {
#pragma omp simd
          for (std::size_t e = 0; e < d_v; ++e) w_i[e] = beta_i * v_i[e];
        }
      }
      // U = (I + StrictLower(diag(beta) A))^{-1} W = T W (U = W without the delta rule)
      const float* U = b.W.data();
      if (cfg.delta && L > 1) {
        invert_unit_lower(L, b.pairs.data(), ld, beta_c, b.T.data());
        detail::sgemm(L, d_v, L, 1.0f, b.T.data(), L, b.W.data(), d_v, false, 0.0f, b.U.data(), d_v);
        U = b.U.data();
      }
      // S_0 <- diag(e^{G_L}) S_0, then the check of S_0, the previous chunk's state (a decay
      // factor in [0, 1] keeps a finite value finite, turns inf into inf or NaN, keeps NaN)
      if (w > 1)
        for (std::size_t c = 0; c < d_k; ++c) {
          const auto decay = static_cast<float>(std::exp(G_L[c]));
          float* row = S + c * d_v;
#pragma omp simd
          for (std::size_t e = 0; e < d_v; ++e) row[e] *= decay;
        }
      float non_finite_s = 0.0f;
      const float decay = w == 1 ? static_cast<float>(std::exp(G_L[0])) : 1.0f;
#pragma omp simd reduction(+ : non_finite_s)
      for (std::size_t i = 0; i < d_k * d_v; ++i) S[i] *= decay, non_finite_s += S[i] - S[i];
      if (non_finite_s != 0.0f) {  // start > 0: the initial state is checked finite
        fault = {false, true, "state", start - 1};
        break;
      }
      // [O; S_L] = [(Q o e^G) S_0; diag(e^{G_L}) S_0] + [P; (K o e^{G_L - G})^T] U in one SGEMM
      sgemm_transposed_a(L + d_k, d_v, L, b.pairs.data() + L, ld, U, d_v, 1.0f, O, d_v);
      // the chunk's outputs row by row (its state is checked by the next chunk, or after the last)
      float* oc = out.o.data() + (head * n + start) * d_v;
      for (std::size_t i = 0; i < L && !fault.out_of_range; ++i)
        if (non_finite_sum(O + i * d_v, d_v) != 0.0f) fault = {false, true, "output", start + i};
      std::copy_n(O, L * d_v, oc);
      if (fault.out_of_range) break;
      if (last == n - 1 && non_finite_sum(S, d_k * d_v) != 0.0f) fault = {false, true, "state", last};
    }
    std::copy_n(S, d_k * d_v, out.state.data() + head * d_k * d_v);
  }
  // a head that stopped: the reference runs the call, and raises its error (or, where only float's
  // intermediate sums left its range, gives its answer)
  if (std::any_of(faults.begin(), faults.end(), [](const HeadFault& f) { return f.bad_input || f.out_of_range; }))
    return ref::delta_rule_chunked(q, k, v, beta, gate, cfg, chunk_size, initial_state);
  return out;
}

}  // namespace tvlab::opt
