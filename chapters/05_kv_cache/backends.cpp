#include "backends.hpp"

#include "tvlab/cuda/kv_decode.hpp"
#include "tvlab/opt/bf16_kv_decode.hpp"
#include "tvlab/opt/gqa_attention.hpp"
#include "tvlab/opt/gqa_decode.hpp"
#include "tvlab/opt/kv_layout_decode.hpp"
#include "tvlab/opt/mla.hpp"
#include "tvlab/opt/mla_decode.hpp"
#include "tvlab/opt/paged_attention.hpp"
#include "tvlab/opt/quantized_kv_attention.hpp"
#include "tvlab/opt/tpa.hpp"
#include "tvlab/ref/bf16_kv_decode.hpp"
#include "tvlab/ref/gqa_attention.hpp"
#include "tvlab/ref/gqa_decode.hpp"
#include "tvlab/ref/mla.hpp"
#include "tvlab/ref/mla_decode.hpp"
#include "tvlab/ref/paged_attention.hpp"
#include "tvlab/ref/quantized_kv_attention.hpp"
#include "tvlab/ref/tpa.hpp"
#include "tvlab/student/gqa_decode.hpp"

namespace tvlab::kv {
namespace {

// The reference of a cache laid out per token `[capacity, g, d]`: the same numbers read back into
// the per head layout `[g, capacity, d]` (y_{h,t,c} = x_{t,h,c}, a copy), then the reference step.
// A layout changes where the numbers are, not the result.
DecodeAttention reference_per_token_decode(const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache,
                                           std::size_t length, std::optional<double> scale) {
  const Tensor3 k_per_head = xt::transpose(k_cache, {1, 0, 2}), v_per_head = xt::transpose(v_cache, {1, 0, 2});
  return ref::gqa_decode_attention(q, k_per_head, v_per_head, length, scale);
}

}  // namespace

// Every implementation, in the order the lesson reads them: the reference, the optimized CPU
// kernels (the headline versions, then each numbered step), the CUDA kernels, the student's.
const std::vector<Backend>& backends() {
  static const std::vector<Backend> all = [] {
    std::vector<Backend> table = {
        {.name = "ref",
         .kind = BackendKind::reference,
         .caps = {.masks = ref::kGroupedAttentionMaskSupport},  // the masks of gqa_attention
         .decode = ref::gqa_decode_attention,
         .paged_decode = ref::paged_decode_attention_with_lse,
         .mla_decode = ref::mla_absorbed_decode_attention,
         .bf16_decode = ref::bf16_kv_decode_attention,
         .quantized_decode = ref::quantized_kv_decode_attention,
         .per_token_decode = reference_per_token_decode,
         .gqa_attention = ref::grouped_scaled_dot_product_attention,
         .mla_naive = ref::mla_naive,
         .mla_absorbed = ref::mla_absorbed,
         .tpa = ref::tensor_product_attention},
        {.name = "opt",
         .kind = BackendKind::optimized,
         .caps = {.masks = opt::kGroupedAttentionMaskSupport},  // the masks of gqa_attention
         .decode = opt::gqa_decode_attention,
         .paged_decode = opt::paged_decode_attention_with_lse,
         .mla_decode = opt::mla_absorbed_decode_attention,
         .bf16_decode = opt::bf16_kv_decode_attention,
         .quantized_decode = opt::quantized_kv_decode_attention,
         .per_token_decode =
             [](const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache, std::size_t length,
                std::optional<double> scale) {
               return opt::gqa_decode_attention_per_token(q, k_cache, v_cache, length, scale);
             },
         .gqa_attention = opt::grouped_scaled_dot_product_attention,
         .mla_naive = opt::mla_naive,
         .mla_absorbed = opt::mla_absorbed,
         .tpa = opt::tensor_product_attention},
        // The decode step's versions: v1 reads a kv head once per query head, v2 once per group.
        {.name = "opt_v1", .kind = BackendKind::optimized, .decode = opt::gqa_decode_attention_v1},
        {.name = "opt_v2",
         .kind = BackendKind::optimized,
         .decode = [](const Tensor2& q, const Tensor3& k_cache, const Tensor3& v_cache, std::size_t length,
                      std::optional<double> scale) {
           return opt::gqa_decode_attention_v2(q, k_cache, v_cache, length, scale);
         }},
    };
    // MLA's absorbed decode step, each version of the lesson.
    for (const auto& variant : opt::mla_decode_variants())
      table.push_back(
          {.name = "opt_absorbed_" + variant.name, .kind = BackendKind::optimized, .mla_decode = variant.function});
    table.push_back({.name = "cuda",
                     .kind = BackendKind::cuda,
                     .caps = {.needs_device = true},
                     .decode = cuda::gqa_decode_attention,
                     .paged_decode = cuda::paged_decode_attention_with_lse,
                     .mla_decode = cuda::mla_absorbed_decode_attention});
    // Exercise 05.1, the GQA decode step. (05.2 and 05.3, the paged append and MLA's absorbed
    // scores, are parts of these steps, not whole ones: exercises_suite_test.cpp grades them.)
    table.push_back({.name = "student", .kind = BackendKind::student, .decode = student::gqa_decode_attention});
    return table;
  }();
  return all;
}

}  // namespace tvlab::kv
