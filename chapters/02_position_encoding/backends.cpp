#include "backends.hpp"

#include "tvlab/cuda/attention.hpp"
#include "tvlab/cuda/rope.hpp"
#include "tvlab/cuda/rope_attention.hpp"
#include "tvlab/opt/alibi.hpp"
#include "tvlab/opt/attention.hpp"
#include "tvlab/opt/rope.hpp"
#include "tvlab/opt/rope_attention.hpp"
#include "tvlab/ref/alibi.hpp"
#include "tvlab/ref/attention.hpp"
#include "tvlab/ref/rope.hpp"
#include "tvlab/ref/rope_attention.hpp"
#include "tvlab/student/alibi.hpp"
#include "tvlab/student/rope.hpp"

namespace tvlab::ch02 {

const std::vector<Backend>& backends() {
  static const std::vector<Backend> all = [] {
    std::vector<Backend> table = {
        {.name = "ref",
         .kind = BackendKind::reference,
         .apply_rope = ref::apply_rope,
         .alibi_bias = ref::alibi_bias,
         .rope_frequencies = ref::rope_frequencies,
         .attention = ref::scaled_dot_product_attention,
         .rope_attention = ref::rope_attention},
        // opt and cuda use ref::rope_frequencies (configuration arithmetic on d/2 numbers).
        {.name = "opt",
         .kind = BackendKind::optimized,
         .apply_rope = opt::apply_rope,
         .alibi_bias = opt::alibi_bias,
         .attention = opt::scaled_dot_product_attention,
         .rope_attention = opt::rope_attention},
    };
    // Version n of attention with RoPE runs on version n of attention: v1 rotates in a pass of
    // its own, v2 inside its copies of q and k.
    const auto& attention_versions = opt::attention_variants();
    const auto& rope_versions = opt::rope_attention_variants();
    for (std::size_t n = 0; n < attention_versions.size(); ++n)
      table.push_back({.name = "opt_" + attention_versions[n].name,
                       .kind = BackendKind::optimized,
                       .attention = attention_versions[n].function,
                       .rope_attention = rope_versions.at(n).function});
    table.push_back({.name = "cuda",
                     .kind = BackendKind::cuda,
                     .caps = {.needs_device = true},
                     .apply_rope = cuda::apply_rope,
                     .attention = cuda::scaled_dot_product_attention,
                     .rope_attention = cuda::rope_attention});
    // Exercises 02.1 to 02.3: RoPE in both layouts, ALiBi's slopes and bias, the inverse frequencies.
    table.push_back({.name = "student",
                     .kind = BackendKind::student,
                     .apply_rope = student::apply_rope,
                     .alibi_bias = student::alibi_bias,
                     .rope_frequencies = student::rope_frequencies});
    return table;
  }();
  return all;
}

}  // namespace tvlab::ch02
