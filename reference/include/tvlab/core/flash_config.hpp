#pragma once
/// @file
/// Configuration and result of flash attention (chapter 04), shared by every backend.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "tvlab/core/attention_mask.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab {

/// FP8 emulation as in FlashAttention-3: Q, K, V rounded to E4M3 after scaling so that the
/// largest magnitude maps to 448, either one scale per tensor or one per tile of rows (per head:
/// \f$ B_r \f$ rows of Q, \f$ B_c \f$ rows of K and V); the weights \f$ \tilde P \in [0, 1] \f$ rounded to
/// E4M3 before the \f$ \tilde P V \f$ product; scores, softmax statistics and accumulators in fp32 or
/// better.
enum class Fp8Scaling { none, per_tensor, per_block };

/// The format of the inputs of the two matrix products \f$ S = Q K^T \f$ and \f$ \tilde P V \f$:
/// fp32, or the 16-bit formats that tensor cores multiply (fp16: 10 mantissa bits, largest
/// 65504; bf16: 7 mantissa bits, float's range). With fp16 or bf16, Q, K, V and the weights
/// \f$ \tilde P \in [0, 1] \f$ are rounded to the format (nearest even); the products accumulate
/// in fp32 or better, and the softmax statistics and the output stay fp32 or better. This is
/// what `cuda::flash_attention_forward_tensor_core` computes and what the reference emulates.
enum class FlashInputs { fp32, fp16, bf16 };

/// What flash attention computes (the same scores as chapter 00's attention with the same
/// `scale` and `mask`) and how it tiles the work: query tiles of `block_q` rows (\f$ B_r \f$ in
/// the papers), key/value tiles of `block_k` rows (\f$ B_c \f$). The tiles change the order of the
/// arithmetic, never the result.
struct FlashConfig {
  std::optional<double> scale;  ///< default \f$ 1/\sqrt{d_k} \f$
  /// Which keys each query sees and what is added to its scores, as in chapter 00. Key tiles
  /// outside `mask.key_range_of_rows` of a query tile (causal, window) are skipped whole.
  AttentionMask mask;
  std::size_t block_q = 128;    ///< \f$ B_r \f$: query rows per tile
  std::size_t block_k = 128;    ///< \f$ B_c \f$: key/value rows per tile
  Fp8Scaling fp8 = Fp8Scaling::none;  ///< FP8 (E4M3) emulation; implemented by the reference only
  /// 16-bit inputs of the products (exclusive with `fp8`): emulated by the reference, run on
  /// tensor cores by `cuda::flash_attention_forward_tensor_core`; other backends take fp32 only.
  FlashInputs inputs = FlashInputs::fp32;
};

/// The output of the forward pass and what the backward pass needs from it.
struct FlashOutput {
  Tensor3 out;  ///< `[heads, seq_q, head_dim_v]`
  /// `[heads, seq_q]`: \f$ L_i = m_i + \ln \ell_i = \ln \sum_j e^{S_{ij}} \f$, saved so the backward
  /// pass can recompute \f$ P_{ij} = e^{S_{ij} - L_i} \f$ without storing P; \f$ -\infty \f$ for a
  /// query that sees no key.
  Tensor2 lse;
  std::size_t tiles_computed = 0;  ///< (query tile, key tile) pairs whose scores were formed
  std::size_t tiles_skipped = 0;   ///< pairs skipped whole because the causal rule or the window hides them
};

/// Gradients of a scalar loss with respect to q, k, v (same shapes as q, k, v).
struct FlashGrads {
  Tensor3 dq, dk, dv;
};

/// "fp32", "fp16" or "bf16".
const char* to_string(FlashInputs inputs);

/// x rounded to `inputs`' format and back to float (x itself for fp32).
float round_to_inputs(float x, FlashInputs inputs);

/// The elements of x as fp16 or bf16 bits (`inputs` must be one of them), rounded to nearest
/// even: what a tensor-core kernel reads, and the values the reference's emulation uses.
std::vector<std::uint16_t> to_16_bit_inputs(const Tensor3& x, FlashInputs inputs);

/// The largest head dimension the flash kernels support (as FlashAttention-2).
inline constexpr std::size_t kFlashMaxHeadDim = 256;

/// Checks q `[heads, seq_q, d]`, k `[heads, seq_k, d]`, v `[heads, seq_k, d_v]` and cfg for
/// `function` (everything chapter 00's attention checks, plus head_dim and head_dim_v <= 256,
/// positive tile sizes, `fp8` and `inputs` not both set, and with fp16 inputs every |q|, |k|, |v|
/// within fp16's range) and returns the score scale. Throws `tvlab::Error` naming the parameter.
double validate_flash(const char* function, const Tensor3& q, const Tensor3& k, const Tensor3& v,
                      const FlashConfig& cfg);

/// For backends that compute in fp32 only: throws `tvlab::Error` naming `cfg.fp8` or
/// `cfg.inputs` when either asks for a low-precision format.
void require_fp32_flash(const char* function, const FlashConfig& cfg);

/// The checks of `validate_flash` (fp32 inputs only), plus those of the backward pass's extra inputs: `out` and
/// `dout` `[heads, seq_q, head_dim_v]` and `lse` `[heads, seq_q]`, finite (lse may be -inf for a
/// query that sees no key). Returns the score scale.
double validate_flash_backward(const char* function, const Tensor3& q, const Tensor3& k, const Tensor3& v,
                               const Tensor3& out, const Tensor2& lse, const Tensor3& dout, const FlashConfig& cfg);

}  // namespace tvlab
