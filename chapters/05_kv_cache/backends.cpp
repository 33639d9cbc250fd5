#include "backends.hpp"

#include "tvlab/cuda/kv_decode.hpp"
#include "tvlab/opt/gqa_decode.hpp"
#include "tvlab/opt/mla_decode.hpp"
#include "tvlab/opt/paged_attention.hpp"
#include "tvlab/ref/gqa_decode.hpp"
#include "tvlab/ref/mla_decode.hpp"
#include "tvlab/ref/paged_attention.hpp"

namespace tvlab::kv {

// Every implementation, in the order the lesson reads them: the reference, the optimized CPU
// kernels, the CUDA kernels.
const std::vector<Backend>& backends() {
  static const std::vector<Backend> all = {
      {.name = "ref",
       .kind = BackendKind::reference,
       .decode = ref::gqa_decode_attention,
       .paged_decode = ref::paged_decode_attention_with_lse,
       .mla_decode = ref::mla_absorbed_decode_attention},
      {.name = "opt",
       .kind = BackendKind::optimized,
       .decode = opt::gqa_decode_attention,
       .paged_decode = opt::paged_decode_attention,
       .mla_decode = opt::mla_absorbed_decode_attention},
      {.name = "cuda",
       .kind = BackendKind::cuda,
       .caps = {.needs_device = true},
       .decode = cuda::gqa_decode_attention,
       .paged_decode = cuda::paged_decode_attention,
       .mla_decode = cuda::mla_absorbed_decode_attention},
  };
  return all;
}

}  // namespace tvlab::kv
