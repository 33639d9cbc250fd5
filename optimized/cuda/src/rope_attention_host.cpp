// Host-tensor entry point of the CUDA attention with RoPE: validate, then the device run of
// chapter 00's attention with q and k rotated on the device. Compiled with or without nvcc.

#include "tvlab/core/error.hpp"
#include "tvlab/cuda/attention.hpp"
#include "tvlab/cuda/rope_attention.hpp"
#include "attention_run.hpp"

namespace tvlab::cuda {

Tensor3 rope_attention(const Tensor3& q, const Tensor3& k, const Tensor3& v, const AttentionRope& rope,
                       const AttentionConfig& cfg) {
  const char* fn = "rope_attention";
  const double growth = validate_attention_rope(fn, rope, q.shape()[1], k.shape()[1], q.shape()[2]);
  const double scale = validate_attention(fn, q, k, v, cfg, growth);
  require_supported(fn, cfg.mask, kAttentionMaskSupport);
  return detail::run_attention(q, k, v, cfg, scale, &rope);
}

}  // namespace tvlab::cuda
