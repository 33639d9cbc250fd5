// CUDA kernels of chapter 06's delta-rule family (DeltaNet, Gated DeltaNet, KDA, and decayed or
// plain linear attention without the subtraction), recurrent and chunked. The host-tensor
// wrappers are in delta_rule_host.cpp.
//
// A thread block holds 32 columns of S, all d_k rows (state_columns.cuh). Each block recomputes
// what all columns share (the chunk's key products and the triangular system's matrix): d_v / 32
// blocks per head, no communication between them.

#include <cmath>

#include "check.cuh"
#include "state_columns.cuh"
#include "tvlab/cuda/delta_rule_device.hpp"

namespace tvlab::cuda::device {
namespace {

using state_columns::kColumns;
using state_columns::kThreads;
using state_columns::kWarps;

// Row r of q or k (rows 0 .. heads*n - 1 of q, then of k), one warp per row: the factor
// (scale for q, 1 for k), divided by the L2 norm, summed in double, when asked; a zero row to
// normalise is a fault.
__global__ void prepare_rows_kernel(DeltaRuleArgs a) {
  const std::size_t rows = a.heads * a.n;
  const std::size_t r = blockIdx.x * static_cast<std::size_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32, d_k = static_cast<int>(a.d_k);
  if (r >= 2 * rows) return;
  const bool is_q = r < rows;
  const float* x = (is_q ? a.q : a.k) + (r % rows) * a.d_k;
  float* y = (is_q ? a.q_rows : a.k_rows) + (r % rows) * a.d_k;
  double factor = is_q ? a.scale : 1.0;
  if (a.l2_normalize_qk) {
    double sum_sq = 0.0;
    for (int c = lane; c < d_k; c += 32) sum_sq += static_cast<double>(x[c]) * x[c];
    sum_sq = detail::warp_sum(sum_sq);
    if (sum_sq == 0.0) {
      if (lane == 0) *a.fault = 1;
      return;
    }
    factor /= sqrt(sum_sq);
  }
  for (int c = lane; c < d_k; c += 32) y[c] = static_cast<float>(factor * x[c]);
}

// The log gate of (head, position t) on row c of the state: 0 without a gate.
__device__ inline float log_gate(const DeltaRuleArgs& a, std::size_t row, int c) {
  if (a.gate == nullptr) return 0.0f;
  return a.per_channel_gate ? a.gate[row * a.d_k + c] : a.gate[row];
}

// Token by token, for one head and 32 columns of its state:
//   S~ = diag(e^{g_t}) S_{t-1},  u_t = beta_t (v_t - S~^T k_t),  S_t = S~ + k_t u_t^T,  o_t = S_t^T q_t
// (u_t = beta_t v_t without the delta rule; q_t already carries the scale).
__global__ void delta_recurrent_kernel(DeltaRuleArgs a) {
  extern __shared__ float shared[];
  const int d_k = static_cast<int>(a.d_k);
  const state_columns::Position p = state_columns::position(a.d_v);
  const auto [lane, warp, col, has_col] = p;
  float* S = shared;                             // [d_k][32]
  float* k_t = S + d_k * kColumns;               // [d_k]
  float* q_t = k_t + d_k;                        // [d_k]
  float* decay = q_t + d_k;                      // [d_k]: e^{g_t[c]}
  float* part_p = decay + d_k;                   // [4][32]: each warp's share of S~^T k_t
  float* part_o = part_p + kWarps * kColumns;    // [4][32]: each warp's share of S_t^T q_t
  const std::size_t head = blockIdx.x;
  float* s_head = a.state + head * a.d_k * a.d_v;
  state_columns::load(S, s_head, d_k, a.d_v, p);
  bool finite = true;
  for (std::size_t t = 0; t < a.n; ++t) {
    const std::size_t row = head * a.n + t;
    for (int c = threadIdx.x; c < d_k; c += kThreads) {
      k_t[c] = a.k_rows[row * a.d_k + c];
      q_t[c] = a.q_rows[row * a.d_k + c];
      decay[c] = expf(log_gate(a, row, c));
    }
    __syncthreads();
    // decay and predict with the decayed state
    float prediction = 0.0f;
    for (int c = warp; c < d_k; c += kWarps) {
      const float s = S[c * kColumns + lane] * decay[c];
      S[c * kColumns + lane] = s;
      prediction += s * k_t[c];
    }
    part_p[warp * kColumns + lane] = prediction;
    __syncthreads();
    const float v_e = has_col ? a.v[row * a.d_v + col] : 0.0f, beta = a.beta[row];
    float p = 0.0f;
    for (int w = 0; w < kWarps; ++w) p += part_p[w * kColumns + lane];
    const float u = a.delta ? beta * (v_e - p) : beta * v_e;
    // write, then read the updated state
    float read = 0.0f;
    for (int c = warp; c < d_k; c += kWarps) {
      const float s = S[c * kColumns + lane] + k_t[c] * u;
      S[c * kColumns + lane] = s;
      finite = finite && isfinite(s);
      read += s * q_t[c];
    }
    part_o[warp * kColumns + lane] = read;
    __syncthreads();
    if (warp == 0) {
      float o = 0.0f;
      for (int w = 0; w < kWarps; ++w) o += part_o[w * kColumns + lane];
      finite = finite && isfinite(o);
      if (has_col) a.out[row * a.d_v + col] = o;
    }
  }
  if (!finite) *a.fault = 1;
  state_columns::store(s_head, S, d_k, a.d_v, p);
}

// Chunk by chunk (the WY representation with the UT transform), for one head and 32 columns of
// its state. G_i = sum_{s <= i} g_s from the chunk's start, summed in double and kept as a pair of
// floats (hi + lo), so that a difference G_i - G_j keeps its digits when both are large.
__global__ void delta_chunked_kernel(DeltaRuleArgs a) {
  extern __shared__ float shared[];
  const int d_k = static_cast<int>(a.d_k), C = static_cast<int>(a.chunk_size);
  const int w = a.per_channel_gate ? d_k : 1;  // gate columns: one per row of S, or one for all
  const state_columns::Position p = state_columns::position(a.d_v);
  const auto [lane, warp, col, has_col] = p;
  float* S = shared;                  // [d_k][32]: S_0 of the current chunk
  float* K = S + d_k * kColumns;      // [C][d_k]
  float* Q = K + C * d_k;             // [C][d_k], times the scale
  float* G_hi = Q + C * d_k;          // [C][w]; then e^{G_i}
  float* G_lo = G_hi + C * w;         // [C][w]; then e^{G_L - G_i}
  float* G_last = G_lo + C * w;       // [2][w]: G_L's pair, hi then lo
  float* A = G_last + 2 * w;          // [C][C]: decayed key products, j < i
  float* P = A + C * C;               // [C][C]: decayed query-key products, j <= i
  float* U = P + C * C;               // [C][32]: W, then the solved U
  float* beta = U + C * kColumns;     // [C]
  const std::size_t head = blockIdx.x;
  float* s_head = a.state + head * a.d_k * a.d_v;
  state_columns::load(S, s_head, d_k, a.d_v, p);
  // G_i[c] - G_j[c], from the pair
  auto gate_diff = [&](int i, int j, int c) {
    const int gc = a.per_channel_gate ? c : 0;
    return (G_hi[i * w + gc] - G_hi[j * w + gc]) + (G_lo[i * w + gc] - G_lo[j * w + gc]);
  };
  float* to_start = G_hi;  // e^{G_i[c]}, once the pairs are no longer needed
  float* to_end = G_lo;    // e^{G_L[c] - G_i[c]}
  auto gate_index = [&](int i, int c) { return i * w + (a.per_channel_gate ? c : 0); };
  bool finite = true;
  for (std::size_t start = 0; start < a.n; start += a.chunk_size) {
    const int len = static_cast<int>(a.n - start < a.chunk_size ? a.n - start : a.chunk_size);
    const std::size_t first = head * a.n + start;
    for (int idx = threadIdx.x; idx < len * d_k; idx += kThreads) {
      K[idx] = a.k_rows[first * a.d_k + idx];
      Q[idx] = a.q_rows[first * a.d_k + idx];
    }
    for (int i = threadIdx.x; i < len; i += kThreads) beta[i] = a.beta[first + i];
    // G: one thread per gate column, a running sum in double down the chunk
    for (int c = threadIdx.x; c < w; c += kThreads) {
      double sum = 0.0;
      for (int i = 0; i < len; ++i) {
        sum += log_gate(a, first + i, c);
        const float hi = static_cast<float>(sum);
        G_hi[i * w + c] = hi;
        G_lo[i * w + c] = static_cast<float>(sum - hi);
      }
    }
    __syncthreads();
    // A_ij = sum_c k_i[c] k_j[c] e^{G_i[c] - G_j[c]} (j < i),  P_ij = sum_c q_i[c] k_j[c] e^{G_i[c] - G_j[c]} (j <= i)
    for (int idx = threadIdx.x; idx < len * len; idx += kThreads) {
      const int i = idx / len, j = idx % len;
      float a_ij = 0.0f, p_ij = 0.0f;
      if (j <= i) {
        if (a.per_channel_gate) {
          for (int c = 0; c < d_k; ++c) {
            const float decayed_k = K[j * d_k + c] * expf(gate_diff(i, j, c));
            a_ij += K[i * d_k + c] * decayed_k;
            p_ij += Q[i * d_k + c] * decayed_k;
          }
        } else {
          for (int c = 0; c < d_k; ++c) {
            a_ij += K[i * d_k + c] * K[j * d_k + c];
            p_ij += Q[i * d_k + c] * K[j * d_k + c];
          }
          const float decay = expf(gate_diff(i, j, 0));
          a_ij *= decay;
          p_ij *= decay;
        }
      }
      A[i * C + j] = j < i ? a_ij : 0.0f;
      P[i * C + j] = p_ij;
    }
    const int last = len - 1;
    for (int c = threadIdx.x; c < w; c += kThreads) {
      G_last[c] = G_hi[last * w + c];
      G_last[w + c] = G_lo[last * w + c];
    }
    __syncthreads();
    // the decay factors every lane reads, one exponential each: e^{G_i} and e^{G_L - G_i} (<= 1),
    // in place of the pairs
    for (int idx = threadIdx.x; idx < len * w; idx += kThreads) {
      const int c = idx % w;
      const float hi = G_hi[idx], lo = G_lo[idx];
      to_start[idx] = expf(hi + lo);
      to_end[idx] = expf((G_last[c] - hi) + (G_last[w + c] - lo));
    }
    __syncthreads();
    // W = diag(beta) (V - (K o e^G) S_0) (diag(beta) V without the delta rule)
    for (int i = warp; i < len; i += kWarps) {
      float prediction = 0.0f;
      if (a.delta)
        for (int c = 0; c < d_k; ++c) prediction += K[i * d_k + c] * to_start[gate_index(i, c)] * S[c * kColumns + lane];
      const float v_e = has_col ? a.v[(first + i) * a.d_v + col] : 0.0f;
      U[i * kColumns + lane] = beta[i] * (v_e - prediction);
    }
    __syncthreads();
    // (I + StrictLower(diag(beta) A)) U = W by forward substitution, one column per lane of warp 0:
    // u_i = w_i - beta_i sum_{j<i} A_ij u_j (nothing to solve without the delta rule)
    if (a.delta && warp == 0)
      for (int i = 1; i < len; ++i) {
        float u = U[i * kColumns + lane];
        for (int j = 0; j < i; ++j) u -= beta[i] * A[i * C + j] * U[j * kColumns + lane];
        U[i * kColumns + lane] = u;
      }
    __syncthreads();
    // o_i = S_0^T (e^{G_i} o q_i) + sum_{j <= i} P_ij u_j
    for (int i = warp; i < len; i += kWarps) {
      float o = 0.0f;
      for (int c = 0; c < d_k; ++c) o += Q[i * d_k + c] * to_start[gate_index(i, c)] * S[c * kColumns + lane];
      for (int j = 0; j <= i; ++j) o += P[i * C + j] * U[j * kColumns + lane];
      finite = finite && isfinite(o);
      if (has_col) a.out[(first + i) * a.d_v + col] = o;
    }
    __syncthreads();
    // S_C = diag(e^{G_C}) S_0 + sum_j diag(e^{G_C - G_j}) k_j u_j^T: the next chunk's S_0
    for (int c = warp; c < d_k; c += kWarps) {
      float s = to_start[gate_index(last, c)] * S[c * kColumns + lane];
      for (int j = 0; j < len; ++j) s += to_end[gate_index(j, c)] * K[j * d_k + c] * U[j * kColumns + lane];
      finite = finite && isfinite(s);
      S[c * kColumns + lane] = s;
    }
    __syncthreads();
  }
  if (!finite) *a.fault = 1;
  state_columns::store(s_head, S, d_k, a.d_v, p);
}

}  // namespace

std::size_t delta_rule_shared_bytes(std::size_t d_k, std::size_t chunk_size, bool per_channel_gate) {
  const std::size_t C = chunk_size, w = per_channel_gate ? d_k : 1;
  const std::size_t floats = chunk_size == 0 ? d_k * kColumns + 3 * d_k + 2 * kWarps * kColumns
                                             : d_k * kColumns + 2 * C * d_k + 2 * C * w + 2 * w + 2 * C * C + C * kColumns + C;
  return floats * sizeof(float);
}

void delta_rule(const DeltaRuleArgs& args) {
  if (args.heads == 0 || args.n == 0) return;
  const std::size_t rows = 2 * args.heads * args.n;  // of q, then of k
  constexpr int kRowsPerBlock = 8;                    // one warp each
  prepare_rows_kernel<<<static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock), 32 * kRowsPerBlock>>>(args);
  TVLAB_CUDA_CHECK(cudaGetLastError());
  const std::size_t bytes = delta_rule_shared_bytes(args.d_k, args.chunk_size, args.per_channel_gate);
  state_columns::launch(args.chunk_size == 0 ? delta_recurrent_kernel : delta_chunked_kernel, args.heads, args.d_v,
                        bytes, args);
}

}  // namespace tvlab::cuda::device
