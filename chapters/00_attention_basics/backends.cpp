#include "backends.hpp"

#include "tvlab/cuda/attention.hpp"
#include "tvlab/cuda/softmax.hpp"
#include "tvlab/opt/attention.hpp"
#include "tvlab/opt/softmax.hpp"
#include "tvlab/ref/attention.hpp"
#include "tvlab/ref/softmax.hpp"
#include "tvlab/student/attention.hpp"
#include "tvlab/student/softmax.hpp"

namespace tvlab::ch00 {

const std::vector<Backend>& backends() {
  static const std::vector<Backend> all = [] {
    std::vector<Backend> table = {
        {.name = "ref",
         .kind = BackendKind::reference,
         .caps = {.masks = ref::kAttentionMaskSupport},
         .softmax = ref::softmax,
         .sdpa = ref::scaled_dot_product_attention,
         .mha = ref::multi_head_attention},
        // The headline optimized versions.
        {.name = "opt",
         .kind = BackendKind::optimized,
         .caps = {.masks = opt::kAttentionMaskSupport},
         .softmax = opt::softmax,
         .sdpa = opt::scaled_dot_product_attention,
         .mha = opt::multi_head_attention},
    };
    // Every step of the lesson's optimized attention, each tested on its own.
    for (const auto& variant : opt::attention_variants())
      table.push_back({.name = "opt_" + variant.name,
                       .kind = BackendKind::optimized,
                       .caps = {.masks = opt::kAttentionMaskSupport},
                       .sdpa = variant.function});
    table.push_back({.name = "cuda",
                     .kind = BackendKind::cuda,
                     .caps = {.needs_device = true, .masks = cuda::kAttentionMaskSupport},
                     .softmax = cuda::softmax,
                     .sdpa = cuda::scaled_dot_product_attention,
                     .mha = cuda::multi_head_attention});
    // Exercises 00.1 and 00.2.
    table.push_back({.name = "student",
                     .kind = BackendKind::student,
                     .caps = {.masks = student::kAttentionMaskSupport},
                     .softmax = student::softmax,
                     .sdpa = student::scaled_dot_product_attention});
    return table;
  }();
  return all;
}

}  // namespace tvlab::ch00
