#include "tvlab/core/flash_config.hpp"

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/error.hpp"

namespace tvlab {

double validate_flash(const char* fn, const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg) {
  require(cfg.block_q > 0, fn, "block_q (", cfg.block_q, ") must be positive");
  require(cfg.block_k > 0, fn, "block_k (", cfg.block_k, ") must be positive");
  AttentionConfig attention;
  attention.causal = cfg.causal;
  attention.scale = cfg.scale;
  const double scale = validate_attention(fn, q, k, v, attention);
  require(q.shape()[2] <= kFlashMaxHeadDim, fn, "head_dim (", q.shape()[2], ") must be <= ", kFlashMaxHeadDim);
  require(v.shape()[2] <= kFlashMaxHeadDim, fn, "head_dim_v (", v.shape()[2], ") must be <= ", kFlashMaxHeadDim);
  return scale;
}

}  // namespace tvlab
