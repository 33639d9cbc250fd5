// CUDA kernels of chapter 09: the rows of an MoE layer gathered by expert and combined back by
// token (the products between them are cuBLAS SGEMMs, blas.cu), and the top-k router.

#include <cfloat>
#include <cmath>

#include "check.cuh"
#include "tvlab/cuda/moe_device.hpp"

namespace tvlab::cuda::device {
namespace {

constexpr int kMaxExperts = 1024;  // 32 per lane
constexpr int kMaxGroups = 64;

// One block per row: its threads copy the row.
__global__ void gather_kernel(const float* x, const std::int32_t* token, int d_model, float* out) {
  const long long row = blockIdx.x;
  const float* src = x + static_cast<long long>(token[row]) * d_model;
  for (int c = threadIdx.x; c < d_model; c += blockDim.x) out[row * d_model + c] = src[c];
}

// One block per token: y_t = sum_i g_i rows[row_i] over its assignments, in order.
__global__ void combine_kernel(const float* rows, const std::int32_t* token_first, const std::int32_t* row, const float* gate,
                               int d_model, float* y) {
  const int t = blockIdx.x;
  for (int c = threadIdx.x; c < d_model; c += blockDim.x) {
    float sum = 0.0f;
    for (int i = token_first[t]; i < token_first[t + 1]; ++i)
      sum = __fadd_rn(sum, __fmul_rn(gate[i], rows[static_cast<long long>(row[i]) * d_model + c]));
    y[static_cast<long long>(t) * d_model + c] = sum;
  }
}

// The larger of two (value, index) pairs, ties to the lower index.
__device__ void better(double& v, int& i, double other_v, int other_i) {
  if (other_i >= 0 && (i < 0 || other_v > v || (other_v == v && other_i < i))) v = other_v, i = other_i;
}

// The warp's largest (value, index) pair, in every lane.
__device__ void warp_best(double& v, int& i) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const double ov = __shfl_xor_sync(0xffffffffu, v, offset);
    const int oi = __shfl_xor_sync(0xffffffffu, i, offset);
    better(v, i, ov, oi);
  }
}

__device__ double warp_sum(double v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// One warp per token, lane l holding experts l, l + 32, ...: scores, selection, top-k and gates as
// ref::route_top_k (in double), the maxima and sums by warp shuffles.
__global__ void route_kernel(const float* logits, int tokens, int num_experts, int k, bool sigmoid, bool normalize,
                             double temperature, double clip, int n_group, int topk_group, double scale, const float* bias,
                             std::int32_t* expert, float* gate) {
  const int t = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (t >= tokens) return;
  const int per_lane = (num_experts + 31) / 32;
  double s[kMaxExperts / 32], choice[kMaxExperts / 32];
  const float* z = logits + static_cast<long long>(t) * num_experts;
  double largest = -DBL_MAX;
  for (int i = 0; i < per_lane; ++i) {
    const int e = lane + 32 * i;
    if (e >= num_experts) continue;
    double v = z[e];
    if (clip > 0.0) v = fmin(fmax(v, -clip), clip);
    s[i] = v / temperature;
    largest = fmax(largest, s[i]);
  }
  for (int offset = 16; offset > 0; offset /= 2) largest = fmax(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
  double sum = 0.0;
  for (int i = 0; i < per_lane; ++i) {
    if (lane + 32 * i >= num_experts) continue;
    s[i] = sigmoid ? 1.0 / (1.0 + exp(-s[i])) : exp(s[i] - largest);
    sum += s[i];
  }
  sum = warp_sum(sum);
  for (int i = 0; i < per_lane; ++i) {
    const int e = lane + 32 * i;
    if (e >= num_experts) continue;
    if (!sigmoid) s[i] /= sum;
    choice[i] = s[i] + (bias ? bias[e] : 0.0f);
  }
  if (n_group > 1) {
    // each group's score: the sum of its two best selection scores (a warp maximum twice)
    const int per_group = num_experts / n_group;
    double group_score[kMaxGroups];
    for (int g = 0; g < n_group; ++g) {
      double v = 0.0;
      int i1 = -1;
      for (int i = 0; i < per_lane; ++i) {
        const int e = lane + 32 * i;
        if (e / per_group == g && e < num_experts) better(v, i1, choice[i], e);
      }
      warp_best(v, i1);
      double v2 = 0.0;
      int i2 = -1;
      for (int i = 0; i < per_lane; ++i) {
        const int e = lane + 32 * i;
        if (e / per_group == g && e < num_experts && e != i1) better(v2, i2, choice[i], e);
      }
      warp_best(v2, i2);
      group_score[g] = v + v2;
    }
    // keep the topk_group best groups (ties: the lower group); rule out the others' experts
    bool kept[kMaxGroups];
    for (int g = 0; g < n_group; ++g) kept[g] = false;
    for (int j = 0; j < topk_group; ++j) {
      int best = -1;
      for (int g = 0; g < n_group; ++g)
        if (!kept[g] && (best < 0 || group_score[g] > group_score[best])) best = g;
      kept[best] = true;
    }
    for (int i = 0; i < per_lane; ++i) {
      const int e = lane + 32 * i;
      if (e < num_experts && !kept[e / per_group]) choice[i] = -INFINITY;
    }
  }
  // the k best by repeated warp maxima (ties: the lower index); the chosen one leaves the race
  double total = 0.0;
  for (int j = 0; j < k; ++j) {
    double v = 0.0;
    int best = -1;
    for (int i = 0; i < per_lane; ++i) {
      const int e = lane + 32 * i;
      if (e < num_experts && choice[i] != -INFINITY) better(v, best, choice[i], e);
    }
    warp_best(v, best);
    double score = 0.0;
    if (best % 32 == lane) {
      choice[best / 32] = -INFINITY;
      score = s[best / 32];
    }
    score = warp_sum(score);  // the chosen expert's score, from its lane to all
    total += score;
    if (lane == 0) expert[t * k + j] = best;
  }
  __syncwarp();
  // the gates: each chosen score (shuffled from the lane that holds it), renormalised in double
  for (int j = 0; j < k; ++j) {
    const int e = expert[t * k + j];
    const double score = __shfl_sync(0xffffffffu, s[e / 32], e % 32);
    if (lane == 0) gate[t * k + j] = static_cast<float>((normalize ? score / total : score) * scale);
  }
}

}  // namespace

void gather_rows(const float* x, const std::int32_t* token, std::size_t rows, std::size_t d_model, float* out) {
  if (rows == 0) return;
  gather_kernel<<<static_cast<unsigned>(rows), 128>>>(x, token, static_cast<int>(d_model), out);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

void combine_rows(const float* rows, const std::int32_t* token_first, const std::int32_t* row, const float* gate,
                  std::size_t tokens, std::size_t d_model, float* y) {
  if (tokens == 0) return;
  combine_kernel<<<static_cast<unsigned>(tokens), 128>>>(rows, token_first, row, gate, static_cast<int>(d_model), y);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

void route_top_k(const float* logits, std::size_t tokens, std::size_t num_experts, std::size_t k, bool sigmoid, bool normalize,
                 float temperature, float logit_clip, std::size_t n_group, std::size_t topk_group, float scale, const float* bias,
                 std::int32_t* expert, float* gate) {
  if (tokens == 0) return;
  constexpr int kWarps = 4;  // tokens per block
  route_kernel<<<static_cast<unsigned>((tokens + kWarps - 1) / kWarps), kWarps * 32>>>(
      logits, static_cast<int>(tokens), static_cast<int>(num_experts), static_cast<int>(k), sigmoid, normalize, temperature,
      logit_clip, static_cast<int>(n_group), static_cast<int>(topk_group), scale, bias, expert, gate);
  TVLAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tvlab::cuda::device
