#include "impls.hpp"
#include "tvlab/cuda/flash_attention.hpp"
#include "tvlab/opt/flash_attention.hpp"
#include "tvlab/opt/online_softmax.hpp"
#include "tvlab/ref/flash_attention.hpp"
#include "tvlab/ref/online_softmax.hpp"

namespace tvlab::ch04 {

// ref, opt (the headline version), every numbered version of opt's flash forward, and the two
// CUDA kernels (tiled with the backward pass, and one thread per row).
const std::vector<Impl>& registry() {
  static const std::vector<Impl> impls = [] {
    std::vector<Impl> all = {
        {"ref", false, ref::online_softmax, ref::online_softmax_merge, analysis::best_flash_tiles,
         ref::flash_attention_forward, ref::flash_attention_backward, ref::kFlashMaskSupport},
        {"opt", false, opt::online_softmax, nullptr, nullptr, opt::flash_attention_forward, opt::flash_attention_backward,
         opt::kFlashMaskSupport},
    };
    const MaskSupport opt_mask = opt::kFlashMaskSupport, cuda_mask = cuda::kFlashMaskSupport;
    for (const auto& variant : opt::flash_variants())
      all.push_back({"opt_" + variant.name, false, nullptr, nullptr, nullptr, variant.function, nullptr, opt_mask});
    all.push_back({"opt_backward_v1", false, nullptr, nullptr, nullptr, nullptr, opt::flash_attention_backward_v1, opt_mask});
    all.push_back({"opt_backward_v2", false, nullptr, nullptr, nullptr, nullptr, opt::flash_attention_backward_v2, opt_mask});
    all.push_back({"opt_backward_v3", false, nullptr, nullptr, nullptr, nullptr, opt::flash_attention_backward_v3, opt_mask});
    all.push_back({"cuda", true, nullptr, nullptr, nullptr, cuda::flash_attention_forward, cuda::flash_attention_backward,
                   cuda_mask});
    all.push_back({"cuda_rowwise", true, nullptr, nullptr, nullptr, cuda::flash_attention_forward_rowwise, nullptr,
                   cuda_mask});
    return all;
  }();
  return impls;
}

}  // namespace tvlab::ch04
