#include "tvlab/core/flash_config.hpp"

#include <utility>

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/error.hpp"

namespace tvlab {

double validate_flash(const char* fn, const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg) {
  require(cfg.block_q > 0, fn, "block_q (", cfg.block_q, ") must be positive");
  require(cfg.block_k > 0, fn, "block_k (", cfg.block_k, ") must be positive");
  require(cfg.fp8 == Fp8Scaling::none || cfg.fp8 == Fp8Scaling::per_tensor || cfg.fp8 == Fp8Scaling::per_block, fn,
          "fp8 has an unknown value");
  AttentionConfig attention;
  attention.causal = cfg.causal;
  attention.scale = cfg.scale;
  const double scale = validate_attention(fn, q, k, v, attention);
  require(q.shape()[2] <= kFlashMaxHeadDim, fn, "head_dim (", q.shape()[2], ") must be <= ", kFlashMaxHeadDim);
  require(v.shape()[2] <= kFlashMaxHeadDim, fn, "head_dim_v (", v.shape()[2], ") must be <= ", kFlashMaxHeadDim);
  return scale;
}

double validate_flash_backward(const char* fn, const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor3& out,
                               const Tensor2& lse, const Tensor3& dout, const FlashConfig& cfg) {
  const double scale = validate_flash(fn, q, k, v, cfg);
  require(cfg.fp8 == Fp8Scaling::none, fn, "fp8 emulation (cfg.fp8) covers the forward pass only");
  const std::size_t heads = q.shape()[0], seq_q = q.shape()[1], d_v = v.shape()[2];
  for (const auto& [name, t] : {std::pair<const char*, const Tensor3*>{"out", &out}, {"dout", &dout}}) {
    require_dim(fn, name, *t, 0, "heads", heads, "the heads of q");
    require_dim(fn, name, *t, 1, "seq", seq_q, "the seq of q");
    require_dim(fn, name, *t, 2, "head_dim", d_v, "the head_dim of v");
    require_finite(fn, name, *t);
  }
  require_dim(fn, "lse", lse, 0, "heads", heads, "the heads of q");
  require_dim(fn, "lse", lse, 1, "seq", seq_q, "the seq of q");
  require_finite_or_neg_inf(fn, "lse", lse);
  return scale;
}

}  // namespace tvlab
