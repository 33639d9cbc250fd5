#include "tvlab/opt/gqa_decode.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tvlab/core/error.hpp"
#include "tvlab/opt/online_softmax.hpp"

#include "detail/flash_tiles.hpp"

namespace tvlab::opt {
namespace {

constexpr const char* kFunction = "gqa_decode_attention";
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Positions per block of a v2 work item. With dot products: 512, so that keys and values are read
// in long runs (256 KiB each at d = 128) that stay in L2 between the scores and P V. With the
// micro-kernel: 64, so that the transposed keys [d, 64] (32 KiB at d = 128) stay in L1.
constexpr std::size_t kBlockDot = 512, kBlockMicroKernel = 64;
static_assert(kBlockDot % detail::kTileCols == 0 && kBlockMicroKernel % detail::kTileCols == 0,
              "a block is a whole number of micro-kernel widths");

// From this many query rows per kv head on, the scores go through the register-blocked micro-kernel,
// whose transposition of each key block costs about as much as 16 rows' dot products save
// (measured at 32K positions, 2 threads: 4 rows 2.4x faster with dot products, 32 rows (MQA)
// 1.25x faster with the micro-kernel).
constexpr std::size_t kMicroKernelRows = 16;

std::size_t round_up(std::size_t x, std::size_t multiple) { return (x + multiple - 1) / multiple * multiple; }

// q . k over d floats (vectorised by the compiler).
inline float dot(const float* q, const float* k, std::size_t d) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (std::size_t e = 0; e < d; ++e) sum += q[e] * k[e];
  return sum;
}

// S[r][c] = scale q_r . k_c for r < rows, c < cols (q [rows, d], keys [cols, d], S [rows, lds]).
// Four keys at a time: a dot product is a chain of dependent FMAs (d / lanes of them, each waiting
// for the last), so four independent chains keep the FMA units busy; the four keys (4 d floats)
// and the group's query rows stay in L1 while every row uses them.
void scores_by_dot_products(const float* q, std::size_t rows, const float* keys, std::size_t cols, std::size_t d,
                            float scale, float* s, std::size_t lds) {
  using detail::FloatBatch;
  using detail::kLanes;
  const std::size_t d_vec = d / kLanes * kLanes;  // the rest, d % lanes, in scalar
  std::size_t c = 0;
  for (; c + 4 <= cols; c += 4)
    for (std::size_t r = 0; r < rows; ++r) {
      const float* qr = q + r * d;
      FloatBatch acc[4] = {};
      for (std::size_t e = 0; e < d_vec; e += kLanes) {
        const FloatBatch qe = FloatBatch::load_unaligned(qr + e);
        for (std::size_t x = 0; x < 4; ++x) acc[x] = xsimd::fma(qe, FloatBatch::load_unaligned(keys + (c + x) * d + e), acc[x]);
      }
      for (std::size_t x = 0; x < 4; ++x) {
        float sum = xsimd::hadd(acc[x]);
        for (std::size_t e = d_vec; e < d; ++e) sum += qr[e] * keys[(c + x) * d + e];
        s[r * lds + c + x] = scale * sum;
      }
    }
  for (; c < cols; ++c)  // the last cols % 4 keys, one at a time
    for (std::size_t r = 0; r < rows; ++r) s[r * lds + c] = scale * dot(q + r * d, keys + c * d, d);
}

}  // namespace

// ---------------------------------------------------------------------------------------- v1

GqaDecodeOutput gqa_decode_attention_v1(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                        std::size_t length, std::optional<double> scale) {
  const ref::GqaDecodeDims dims = ref::validate_gqa_decode(kFunction, q, k_cache, v_cache, length, scale);
  const auto& [heads, kv_heads, group, capacity, n, d, d_v, scale_value] = dims;
  const auto scale_f = static_cast<float>(scale_value);
  GqaDecodeOutput result{Tensor2::from_shape({heads, d_v}), Tensor1::from_shape({heads})};

#pragma omp parallel
  {
    std::vector<float> s(n);  // this thread's row of scores
#pragma omp for schedule(static)
    for (std::ptrdiff_t task = 0; task < static_cast<std::ptrdiff_t>(heads); ++task) {
      const auto i = static_cast<std::size_t>(task);
      const std::size_t kv = i / group;  // query head i reads kv head floor(i / (h/g))
      const float* qi = q.data() + i * d;
      const float* keys = k_cache.data() + kv * capacity * d;
      const float* values = v_cache.data() + kv * capacity * d_v;
      // s_j = scale q_i . k_j over the cached positions; m = max_j s_j
      float m = kNegInf;
      for (std::size_t j = 0; j < n; ++j) {
        s[j] = scale_f * dot(qi, keys + j * d, d);
        m = std::max(m, s[j]);
      }
      // l = sum_j e^{s_j - m};  o = sum_j e^{s_j - m} v_j / l, one contiguous axpy per position
      float* o = result.out.data() + i * d_v;
      std::fill(o, o + d_v, 0.0f);
      float l = 0.0f;
      for (std::size_t j = 0; j < n; ++j) {
        const float p = std::exp(s[j] - m);
        l += p;
        const float* vj = values + j * d_v;
#pragma omp simd
        for (std::size_t e = 0; e < d_v; ++e) o[e] += p * vj[e];
      }
      const float inv_l = 1.0f / l;
#pragma omp simd
      for (std::size_t e = 0; e < d_v; ++e) o[e] *= inv_l;
      result.lse(i) = m + std::log(l);  // L = m + ln l
    }
  }
  return result;
}

// ---------------------------------------------------------------------------------------- v2

std::size_t gqa_decode_splits(std::size_t length, std::size_t kv_heads, std::size_t threads) {
  constexpr std::size_t kItemsPerThread = 4, kMinSplitLength = 256;
  const std::size_t wanted_items = kItemsPerThread * std::max<std::size_t>(threads, 1);
  const std::size_t wanted = (wanted_items + kv_heads - 1) / std::max<std::size_t>(kv_heads, 1);
  const std::size_t most = std::max<std::size_t>(1, length / kMinSplitLength);
  return std::clamp<std::size_t>(wanted, 1, most);
}

GqaDecodeOutput gqa_decode_attention_v2(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                        std::size_t length, std::optional<double> scale, std::size_t splits) {
  const ref::GqaDecodeDims dims = ref::validate_gqa_decode(kFunction, q, k_cache, v_cache, length, scale);
  const auto& [heads, kv_heads, group, capacity, n, d, d_v, scale_value] = dims;
  const auto scale_f = static_cast<float>(scale_value);
  const int threads = omp_get_max_threads();
  if (splits == 0) splits = gqa_decode_splits(n, kv_heads, static_cast<std::size_t>(threads));
  require(splits <= n, kFunction, "splits (", splits, ") must not exceed length (", n, "): every split holds a position");
  // The micro-kernels work on whole register widths: values and accumulators padded to dv_pad.
  const std::size_t dv_pad = round_up(d_v, detail::kTileCols);
  const std::size_t block = group >= kMicroKernelRows ? kBlockMicroKernel : kBlockDot;
  const bool values_padded = dv_pad != d_v;

  // The partial state of every (split, query head): m, l and the unnormalised output O~ [dv_pad].
  // Split-major, so that a group's h/g rows are contiguous as the micro-kernel wants them.
  std::vector<float> part_m(splits * heads, kNegInf), part_l(splits * heads, 0.0f), part_o(splits * heads * dv_pad, 0.0f);
  const auto items = static_cast<std::ptrdiff_t>(kv_heads * splits);
  GqaDecodeOutput result{Tensor2::from_shape({heads, d_v}), Tensor1::from_shape({heads})};

#pragma omp parallel num_threads(threads)
  {
    // Per thread: the scores of the group [h/g, block], the block's keys transposed [d, block] (for
    // the micro-kernel), and a block of values padded to dv_pad when d_v is not a whole number of
    // register widths (the padding stays 0).
    std::vector<float> s(group * block), kt(group >= kMicroKernelRows ? d * block : 0, 0.0f);
    std::vector<float> v_block(values_padded ? block * dv_pad : 0, 0.0f);
#pragma omp for schedule(dynamic)
    for (std::ptrdiff_t item = 0; item < items; ++item) {
      const std::size_t kv = static_cast<std::size_t>(item) / splits, split = static_cast<std::size_t>(item) % splits;
      const std::size_t begin = split * n / splits, end = (split + 1) * n / splits;
      const float* qg = q.data() + kv * group * d;  // the group's h/g query rows [h/g, d]
      const float* keys = k_cache.data() + kv * capacity * d;
      const float* values = v_cache.data() + kv * capacity * d_v;
      float* m = part_m.data() + split * heads + kv * group;
      float* l = part_l.data() + split * heads + kv * group;
      float* o = part_o.data() + (split * heads + kv * group) * dv_pad;
      for (std::size_t c0 = begin; c0 < end; c0 += block) {
        const std::size_t cols = std::min(block, end - c0);
        // S[r][c] = scale q_r . k_{c0+c} for the h/g rows of the group.
        if (group >= kMicroKernelRows) {
          // [h/g, d] x [d, block] on chapter 04's micro-kernel: the block's keys transposed to
          // kt [d, block] (the columns past `cols` keep earlier finite keys: their scores are
          // replaced by -inf below), then four query rows share every load of K^T.
          for (std::size_t c = 0; c < cols; ++c) {
            const float* kc = keys + (c0 + c) * d;
            for (std::size_t e = 0; e < d; ++e) kt[e * block + c] = kc[e];
          }
          detail::score_tile(qg, d, kt.data(), block, s.data(), block, group, block, scale_f);
        } else {
          scores_by_dot_products(qg, group, keys + c0 * d, cols, d, scale_f, s.data(), block);
        }
        // Per query row: columns past the split count as -inf; m' = max(m, rowmax S), P~ = e^{S - m'},
        // l' = e^{m - m'} l + rowsum P~, O~ row *= e^{m - m'} (chapter 04's step).
        for (std::size_t r = 0; r < group; ++r) {
          float* srow = s.data() + r * block;
          std::fill(srow + cols, srow + block, kNegInf);
          detail::online_softmax_row(srow, block, m[r], l[r], o + r * dv_pad, dv_pad);
        }
        // O~ += P~ V_block: [h/g, cols] x [cols, d_v], four query rows sharing every load of V.
        const float* vb = values + c0 * d_v;
        if (values_padded) {
          for (std::size_t c = 0; c < cols; ++c) std::copy_n(vb + c * d_v, d_v, v_block.data() + c * dv_pad);
          vb = v_block.data();
        }
        detail::accumulate_pv(s.data(), block, vb, dv_pad, o, group, cols);
      }
    }

    // Merge the splits of each query head, as online_softmax_merge merges two softmax states:
    // m = max_s m_s, l = sum_s e^{m_s - m} l_s, o = sum_s e^{m_s - m} O~_s / l, L = m + ln l.
#pragma omp for schedule(static)
    for (std::ptrdiff_t task = 0; task < static_cast<std::ptrdiff_t>(heads); ++task) {
      const auto i = static_cast<std::size_t>(task);
      SoftmaxState total;
      for (std::size_t split = 0; split < splits; ++split)
        total = online_softmax_merge(total, {part_m[split * heads + i], part_l[split * heads + i]});
      float* out = result.out.data() + i * d_v;
      std::fill(out, out + d_v, 0.0f);
      for (std::size_t split = 0; split < splits; ++split) {
        const auto weight = static_cast<float>(std::exp(part_m[split * heads + i] - total.max) / total.sum);
        const float* o = part_o.data() + (split * heads + i) * dv_pad;
#pragma omp simd
        for (std::size_t e = 0; e < d_v; ++e) out[e] += weight * o[e];
      }
      result.lse(i) = static_cast<float>(total.max + std::log(total.sum));
    }
  }
  return result;
}

GqaDecodeOutput gqa_decode_attention(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                     std::size_t length, std::optional<double> scale) {
  // MHA (one query head per kv head) with at least 4 heads per thread: v1 and v2 read the cache
  // once each, and v1's two long runs per head (all keys, then all values) stream faster on one
  // core than v2's alternating blocks (measured at 32K positions: 1.5x on one thread). Otherwise
  // (GQA, MQA, or too few heads to share among the threads) v2.
  const std::size_t heads = q.shape()[0], kv_heads = k_cache.dimension() == 3 ? k_cache.shape()[0] : 0;
  const auto threads = static_cast<std::size_t>(omp_get_max_threads());
  if (heads == kv_heads && heads >= 4 * threads) return gqa_decode_attention_v1(q, k_cache, v_cache, length, scale);
  return gqa_decode_attention_v2(q, k_cache, v_cache, length, scale);
}

}  // namespace tvlab::opt
