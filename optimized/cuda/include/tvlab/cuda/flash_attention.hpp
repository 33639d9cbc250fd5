#pragma once
/// @file
/// CUDA flash attention (chapter 04), host tensors in and out. Must match
/// `tvlab::ref::flash_attention_forward` (FP8 emulation excepted: `cfg.fp8` is rejected).

#include "tvlab/core/flash_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::cuda {

/// The parts of `FlashConfig::mask` every flash kernel (rowwise, tiled, tensor core, backward)
/// implements: the causal rule with the bottom-right alignment (query i sees keys
/// \f$ j \le i + n_k - n_q \f$), skipping the key tiles it hides. The others throw `tvlab::Error`
/// naming them (`require_supported`).
inline constexpr MaskSupport kFlashMaskSupport{.causal = true};

/// @ingroup ch04
/// Version 1 (`device::flash_forward_rowwise`): one thread per query row; no tiles (the tile
/// counts stay 0).
FlashOutput flash_attention_forward_rowwise(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                            const FlashConfig& cfg = {});

/// @ingroup ch04
/// Version 2 (`device::flash_forward_tiled`): one thread block per (head, query tile of
/// `cfg.block_q` <= 1024 rows), key/value tiles of `cfg.block_k` rows staged in shared memory,
/// whole tiles skipped under the causal mask; the tile counts come from the kernel. Tiles are
/// clamped to the sequence lengths, and `block_k` is reduced when a key and a value tile would
/// not fit the device's shared memory. Throws `tvlab::Error` naming `block_q` above 1024.
FlashOutput flash_attention_forward(const Tensor3& q, const Tensor3& k, const Tensor3& v, const FlashConfig& cfg = {});

/// @ingroup ch04
/// The backward pass (`device::flash_backward`), fp32: D_i = rowsum(dO_i o O_i), then dK and dV
/// with one thread per key row over staged query tiles, then dQ with one thread per query row
/// over staged key tiles; P recomputed from the saved log-sum-exp in both passes, no atomics.
/// Same contract as `tvlab::ref::flash_attention_backward`; `block_q` and `block_k` (clamped to
/// the sequences) must be <= 1024, and are reduced where a staged tile would not fit the
/// device's shared memory.
FlashGrads flash_attention_backward(const Tensor3& q, const Tensor3& k, const Tensor3& v, const Tensor3& out,
                                    const Tensor2& lse, const Tensor3& dout, const FlashConfig& cfg = {});

/// @ingroup ch04
/// Version 3 (`device::flash_forward_tensor_core`), on tensor cores: Q, K, V rounded on the host to
/// `cfg.inputs` (fp16 or bf16, required), scores and output accumulated in fp32 by WMMA
/// 16 x 16 x 16 products, the weights \f$ \tilde P \f$ rounded to the same format before
/// \f$ \tilde P V \f$; the output and the log-sum-exp are fp32. Computes what
/// `ref::flash_attention_forward` emulates with the same `cfg.inputs`. `block_q` (<= 128) and
/// `block_k` must be multiples of 16; tiles are clamped to the sequences and shrunk until they fit
/// the device's shared memory (the tile counts are those of the tiles used). Needs compute capability 8.0 or later. Throws `tvlab::Error` naming
/// `cfg.inputs`, `block_q` or `block_k`.
FlashOutput flash_attention_forward_tensor_core(const Tensor3& q, const Tensor3& k, const Tensor3& v,
                                                const FlashConfig& cfg);

}  // namespace tvlab::cuda
