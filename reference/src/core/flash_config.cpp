#include "tvlab/core/flash_config.hpp"

#include <cmath>
#include <utility>

#include "tvlab/core/attention_config.hpp"
#include "tvlab/core/dtype.hpp"
#include "tvlab/core/error.hpp"

namespace tvlab {

const char* to_string(FlashInputs inputs) {
  switch (inputs) {
    case FlashInputs::fp32: return "fp32";
    case FlashInputs::fp16: return "fp16";
    case FlashInputs::bf16: return "bf16";
  }
  return "unknown";
}

float round_to_inputs(float x, FlashInputs inputs) {
  switch (inputs) {
    case FlashInputs::fp16: return round_to_fp16(x);
    case FlashInputs::bf16: return round_to_bf16(x);
    case FlashInputs::fp32: break;
  }
  return x;
}

std::vector<std::uint16_t> to_16_bit_inputs(const Tensor3& x, FlashInputs inputs) {
  require(inputs == FlashInputs::fp16 || inputs == FlashInputs::bf16, "to_16_bit_inputs", "inputs (",
          to_string(inputs), ") must be fp16 or bf16");
  std::vector<std::uint16_t> bits(x.size());
  for (std::size_t t = 0; t < x.size(); ++t)
    bits[t] = inputs == FlashInputs::bf16 ? float_to_bf16_bits(x.data()[t]) : float_to_fp16_bits(x.data()[t]);
  return bits;
}

double validate_flash(const char* fn, const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg) {
  require(cfg.block_q > 0, fn, "block_q (", cfg.block_q, ") must be positive");
  require(cfg.block_k > 0, fn, "block_k (", cfg.block_k, ") must be positive");
  require(cfg.fp8 == Fp8Scaling::none || cfg.fp8 == Fp8Scaling::per_tensor || cfg.fp8 == Fp8Scaling::per_block, fn,
          "fp8 has an unknown value");
  require(cfg.inputs == FlashInputs::fp32 || cfg.inputs == FlashInputs::fp16 || cfg.inputs == FlashInputs::bf16, fn,
          "cfg.inputs has an unknown value");
  require(cfg.fp8 == Fp8Scaling::none || cfg.inputs == FlashInputs::fp32, fn, "cfg.fp8 and cfg.inputs (", to_string(cfg.inputs),
          ") both set a low-precision format: choose one");
  const double scale = validate_attention(fn, q, k, v, cfg.scale, cfg.mask);
  require(q.shape()[2] <= kFlashMaxHeadDim, fn, "head_dim (", q.shape()[2], ") must be <= ", kFlashMaxHeadDim);
  require(v.shape()[2] <= kFlashMaxHeadDim, fn, "head_dim_v (", v.shape()[2], ") must be <= ", kFlashMaxHeadDim);
  if (cfg.inputs == FlashInputs::fp16) {
    // fp16's largest finite value is 65504; anything that rounds beyond it (|x| >= 65520) would become inf.
    for (const auto& [name, t] : {std::pair<const char*, const Tensor3*>{"q", &q}, {"k", &k}, {"v", &v}})
      for (const float x : *t)
        require(std::isfinite(round_to_fp16(x)), fn, name, " holds ", x, ", which rounds beyond fp16's largest finite value 65504 (cfg.inputs = fp16)");
  }
  return scale;
}

void require_fp32_flash(const char* fn, const FlashConfig& cfg) {
  require(cfg.fp8 == Fp8Scaling::none, fn, "fp8 emulation (cfg.fp8) is implemented by ref::flash_attention_forward only");
  require(cfg.inputs == FlashInputs::fp32, fn, "cfg.inputs = ", to_string(cfg.inputs),
          ": 16-bit inputs are implemented by ref::flash_attention_forward (emulated) and "
          "cuda::flash_attention_forward_tensor_core only");
}

double validate_flash_backward(const char* fn, const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor3& out,
                               const Tensor2& lse, const Tensor3& dout, const FlashConfig& cfg) {
  require(cfg.fp8 == Fp8Scaling::none, fn, "fp8 emulation (cfg.fp8) covers the forward pass only");
  require(cfg.inputs == FlashInputs::fp32, fn, "cfg.inputs = ", to_string(cfg.inputs), ": 16-bit inputs cover the forward pass only");
  const double scale = validate_flash(fn, q, k, v, cfg);
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
