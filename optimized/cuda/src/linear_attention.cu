// CUDA kernels of chapter 06's causal linear attention, recurrent and chunked, from the state
// (S, z) which they update. The host-tensor wrappers are in linear_attention_host.cpp.
//
// A thread block holds 32 columns of S, all m rows (state_columns.cuh). Every block keeps its own
// copy of z (m floats), read from `z`; the first column block writes it to `z_out`, another array,
// so that no block can read a z another has already advanced.

#include <cmath>

#include "check.cuh"
#include "state_columns.cuh"
#include "tvlab/cuda/linear_attention_device.hpp"

namespace tvlab::cuda::device {
namespace {

using state_columns::kColumns;
using state_columns::kThreads;
using state_columns::kWarps;

__device__ inline float phi(float x, LinearFeatureMap map) {
  switch (map) {
    case LinearFeatureMap::elu_plus_one: return x > 0.0f ? x + 1.0f : expf(x);  // elu(x) + 1
    case LinearFeatureMap::relu: return x > 0.0f ? x : 0.0f;
    case LinearFeatureMap::identity: return x;
  }
  return x;
}

// o / d (or o alone), flagging a normaliser that is zero or not finite and an output that is not finite.
__device__ inline float finish_output(float numerator, float denominator, bool normalize, int* fault) {
  if (normalize && !(denominator != 0.0f && isfinite(denominator))) *fault = 1;
  const float o = normalize ? numerator / denominator : numerator;
  if (!isfinite(o)) *fault = 1;
  return o;
}

// One (head, 32 columns) per thread block, token by token:
//   S_t = S_{t-1} + phi(k_t) v_t^T,  z_t = z_{t-1} + phi(k_t),  o_t = scale phi(q_t)^T S_t / (scale phi(q_t)^T z_t)
__global__ void linear_recurrent_kernel(LinearAttentionArgs a) {
  extern __shared__ float shared[];
  const int m = static_cast<int>(a.m);
  const state_columns::Position p = state_columns::position(a.d_v);
  const auto [lane, warp, col, has_col] = p;
  float* S = shared;                  // [m][32]
  float* z = S + m * kColumns;        // [m]
  float* phi_k = z + m;               // [m]
  float* phi_q = phi_k + m;           // [m], times the scale
  float* part_num = phi_q + m;        // [4][32]: each warp's sum over its rows
  float* part_den = part_num + kWarps * kColumns;  // [4]
  const std::size_t head = blockIdx.x;
  float* s_head = a.s + head * a.m * a.d_v;
  state_columns::load(S, s_head, m, a.d_v, p);
  for (int c = threadIdx.x; c < m; c += kThreads) z[c] = a.z[head * a.m + c];
  for (std::size_t t = 0; t < a.n; ++t) {
    const std::size_t row = head * a.n + t;
    for (int c = threadIdx.x; c < m; c += kThreads) {
      phi_k[c] = phi(a.k[row * a.m + c], a.feature_map);
      phi_q[c] = a.scale * phi(a.q[row * a.m + c], a.feature_map);
    }
    __syncthreads();
    // write, then read the updated state (position t sees itself)
    const float v_t = has_col ? a.v[row * a.d_v + col] : 0.0f;
    float numerator = 0.0f, denominator = 0.0f;
    for (int c = warp; c < m; c += kWarps) {
      const float s = S[c * kColumns + lane] + phi_k[c] * v_t;
      S[c * kColumns + lane] = s;
      numerator += phi_q[c] * s;
      if (lane == 0) {  // z's rows of this warp, once
        z[c] += phi_k[c];
        denominator += phi_q[c] * z[c];
      }
    }
    part_num[warp * kColumns + lane] = numerator;
    if (lane == 0) part_den[warp] = denominator;
    __syncthreads();
    if (warp == 0) {
      float num = 0.0f, den = 0.0f;
      for (int w = 0; w < kWarps; ++w) {
        num += part_num[w * kColumns + lane];
        den += part_den[w];
      }
      const float o = finish_output(num, den, a.normalize, a.fault);
      if (has_col) a.out[row * a.d_v + col] = o;
    }
  }
  __syncthreads();
  state_columns::store(s_head, S, m, a.d_v, p);
  if (blockIdx.y == 0)
    for (int c = threadIdx.x; c < m; c += kThreads) a.z_out[head * a.m + c] = z[c];
}

// One (head, 32 columns) per thread block, chunk by chunk of C positions; for i in the chunk,
//   o_i = (scale phi(q_i)^T S_[c-1] + sum_{j <= i in the chunk} A_ij v_j) / (scale phi(q_i)^T z_[c-1] + sum_j A_ij),
// with A_ij = scale phi(q_i) . phi(k_j); then S_[c] = S_[c-1] + phi(K_c)^T V_c, z_[c] = z_[c-1] + phi(K_c)^T 1.
__global__ void linear_chunked_kernel(LinearAttentionArgs a) {
  extern __shared__ float shared[];
  const int m = static_cast<int>(a.m), C = static_cast<int>(a.chunk_size);
  const state_columns::Position p = state_columns::position(a.d_v);
  const auto [lane, warp, col, has_col] = p;
  float* S = shared;                // [m][32]
  float* z = S + m * kColumns;      // [m]
  float* phi_q = z + m;             // [C][m], times the scale
  float* phi_k = phi_q + C * m;     // [C][m]
  float* A = phi_k + C * m;         // [C][C], zero above the diagonal
  float* V = A + C * C;             // [C][32]
  float* den = V + C * kColumns;    // [C]
  const std::size_t head = blockIdx.x;
  float* s_head = a.s + head * a.m * a.d_v;
  state_columns::load(S, s_head, m, a.d_v, p);
  for (int c = threadIdx.x; c < m; c += kThreads) z[c] = a.z[head * a.m + c];
  for (std::size_t start = 0; start < a.n; start += a.chunk_size) {
    const int len = static_cast<int>(a.n - start < a.chunk_size ? a.n - start : a.chunk_size);
    const std::size_t first = head * a.n + start;  // the chunk's first row
    for (int idx = threadIdx.x; idx < len * m; idx += kThreads) {
      phi_q[idx] = a.scale * phi(a.q[first * a.m + idx], a.feature_map);
      phi_k[idx] = phi(a.k[first * a.m + idx], a.feature_map);
    }
    for (int j = warp; j < len; j += kWarps) V[j * kColumns + lane] = has_col ? a.v[(first + j) * a.d_v + col] : 0.0f;
    __syncthreads();
    // A_ij = phi_q_i . phi_k_j for j <= i (the causal mask inside the chunk)
    for (int idx = threadIdx.x; idx < len * len; idx += kThreads) {
      const int i = idx / len, j = idx % len;
      float dot = 0.0f;
      if (j <= i)
        for (int c = 0; c < m; ++c) dot += phi_q[i * m + c] * phi_k[j * m + c];
      A[i * C + j] = dot;
    }
    __syncthreads();
    // the normalisers: the carried z, then the chunk's own keys
    for (int i = threadIdx.x; i < len; i += kThreads) {
      float d = 0.0f;
      for (int c = 0; c < m; ++c) d += phi_q[i * m + c] * z[c];
      for (int j = 0; j <= i; ++j) d += A[i * C + j];
      den[i] = d;
    }
    __syncthreads();
    // the outputs: inter-chunk (the carried S) plus intra-chunk (A V)
    for (int i = warp; i < len; i += kWarps) {
      float num = 0.0f;
      for (int c = 0; c < m; ++c) num += phi_q[i * m + c] * S[c * kColumns + lane];
      for (int j = 0; j <= i; ++j) num += A[i * C + j] * V[j * kColumns + lane];
      const float o = finish_output(num, den[i], a.normalize, a.fault);
      if (has_col) a.out[(first + i) * a.d_v + col] = o;
    }
    __syncthreads();
    // carry the chunk: S += phi(K_c)^T V_c, z += phi(K_c)^T 1
    for (int c = warp; c < m; c += kWarps) {
      float s = S[c * kColumns + lane];
      for (int j = 0; j < len; ++j) s += phi_k[j * m + c] * V[j * kColumns + lane];
      S[c * kColumns + lane] = s;
    }
    for (int c = threadIdx.x; c < m; c += kThreads) {
      float sum = z[c];
      for (int j = 0; j < len; ++j) sum += phi_k[j * m + c];
      z[c] = sum;
    }
    __syncthreads();
  }
  state_columns::store(s_head, S, m, a.d_v, p);
  if (blockIdx.y == 0)
    for (int c = threadIdx.x; c < m; c += kThreads) a.z_out[head * a.m + c] = z[c];
}

}  // namespace

std::size_t linear_attention_shared_bytes(std::size_t m, std::size_t chunk_size) {
  const std::size_t C = chunk_size;
  const std::size_t floats = chunk_size == 0
                                 ? m * kColumns + 3 * m + kWarps * kColumns + kWarps
                                 : m * kColumns + m + 2 * C * m + C * C + C * kColumns + C;
  return floats * sizeof(float);
}

void causal_linear_attention(const LinearAttentionArgs& args) {
  if (args.heads == 0 || args.n == 0) return;
  const std::size_t bytes = linear_attention_shared_bytes(args.m, args.chunk_size);
  state_columns::launch(args.chunk_size == 0 ? linear_recurrent_kernel : linear_chunked_kernel, args.heads, args.d_v,
                        bytes, args);
}

}  // namespace tvlab::cuda::device
