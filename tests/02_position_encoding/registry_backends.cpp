#include "impls.hpp"
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

namespace tvlab::ch02 {

// ref, opt, every numbered version of opt's attention (v1 rotates in a pass of its own, v2
// inside its copies of q and k), and cuda.
const std::vector<Impl>& registry() {
  static const std::vector<Impl> impls = [] {
    std::vector<Impl> all = {
        // opt and cuda use ref::rope_frequencies (configuration arithmetic on d/2 numbers).
        {"ref", false, ref::apply_rope, ref::alibi_bias, ref::rope_frequencies, ref::scaled_dot_product_attention,
         ref::rope_attention},
        {"opt", false, opt::apply_rope, opt::alibi_bias, nullptr, opt::scaled_dot_product_attention, opt::rope_attention},
    };
    // Version n of attention with RoPE runs on version n of attention.
    const auto& rope_variants = opt::rope_attention_variants();
    for (std::size_t n = 0; n < opt::attention_variants().size(); ++n)
      all.push_back({"opt_" + opt::attention_variants()[n].name, false, nullptr, nullptr, nullptr,
                     opt::attention_variants()[n].function, rope_variants.at(n).function});
    all.push_back({"cuda", true, cuda::apply_rope, nullptr, nullptr, cuda::scaled_dot_product_attention,
                   cuda::rope_attention});
    return all;
  }();
  return impls;
}

}  // namespace tvlab::ch02
