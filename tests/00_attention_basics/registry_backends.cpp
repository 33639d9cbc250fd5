#include "impls.hpp"
#include "tvlab/cuda/attention.hpp"
#include "tvlab/cuda/softmax.hpp"
#include "tvlab/opt/attention.hpp"
#include "tvlab/opt/softmax.hpp"
#include "tvlab/ref/attention.hpp"
#include "tvlab/ref/softmax.hpp"

namespace tvlab::ch00 {

// ref, opt (the headline versions), every numbered variant of opt's attention (opt_v1, opt_v2,
// ...: the lesson's steps, each tested on its own), and cuda.
const std::vector<Impl>& registry() {
  static const std::vector<Impl> impls = [] {
    std::vector<Impl> all = {
        {"ref", false, ref::softmax, ref::scaled_dot_product_attention, ref::multi_head_attention,
         ref::kAttentionMaskSupport},
        {"opt", false, opt::softmax, opt::scaled_dot_product_attention, opt::multi_head_attention,
         opt::kAttentionMaskSupport},
    };
    for (const auto& variant : opt::attention_variants())
      all.push_back({"opt_" + variant.name, false, nullptr, variant.function, nullptr, opt::kAttentionMaskSupport});
    all.push_back({"cuda", true, cuda::softmax, cuda::scaled_dot_product_attention, cuda::multi_head_attention,
                   cuda::kAttentionMaskSupport});
    return all;
  }();
  return impls;
}

}  // namespace tvlab::ch00
