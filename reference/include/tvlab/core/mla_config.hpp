#pragma once
/// @file
/// Chapter 05: the shape of Multi-head Latent Attention (MLA, DeepSeek-V2 section 2.1), with the
/// names of Hugging Face's `DeepseekV2Config` / `DeepseekV3Config`, its weights, its KV cache, and
/// how many numbers that cache holds per token.

#include <cstddef>
#include <optional>
#include <string>

#include "tvlab/core/rope_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab {

/// @ingroup ch05
/// The dimensions of one MLA layer. Paper symbols (DeepSeek-V2, section 2.1) and their Hugging Face
/// names:
/// | paper | field | meaning |
/// | --- | --- | --- |
/// | \f$ d \f$ | `hidden_size` | the width of the hidden state \f$ h_t \f$ |
/// | \f$ n_h \f$ | `num_heads` | attention heads |
/// | \f$ d_c' \f$ | `q_lora_rank` | width of the compressed query \f$ c^Q_t \f$ (absent: no query compression, as DeepSeek-V2-Lite) |
/// | \f$ d_c \f$ | `kv_lora_rank` | width of the compressed key-value latent \f$ c^{KV}_t \f$ |
/// | \f$ d_h \f$ | `qk_nope_head_dim` | per-head width of the content ("no position") query and key |
/// | \f$ d_h^R \f$ | `qk_rope_head_dim` | per-head width of the decoupled RoPE query, and of the one shared RoPE key |
/// | \f$ d_v \f$ | `v_head_dim` | per-head width of the values |
///
/// RoPE rotates only the \f$ d_h^R \f$ coordinates with base `rope_theta`; YaRN's context extension
/// (and DeepSeek's mscale) is not part of this chapter.
struct MlaConfig {
  int hidden_size = 32;              ///< \f$ d \f$
  int num_heads = 4;                 ///< \f$ n_h \f$
  std::optional<int> q_lora_rank;    ///< \f$ d_c' \f$, or none: queries straight from \f$ h_t \f$
  int kv_lora_rank = 8;              ///< \f$ d_c \f$
  int qk_nope_head_dim = 8;          ///< \f$ d_h \f$
  int qk_rope_head_dim = 4;          ///< \f$ d_h^R \f$ (even: RoPE rotates pairs)
  int v_head_dim = 8;                ///< \f$ d_v \f$
  int num_hidden_layers = 1;         ///< layers of the named model (only the memory counts use it)
  double rms_norm_eps = 1e-6;        ///< \f$ \epsilon \f$ of the RMSNorms after \f$ c^Q \f$ and \f$ c^{KV} \f$
  double rope_theta = 10000.0;       ///< RoPE base
  /// Which coordinates of the \f$ d_h^R \f$ form a rotated pair. DeepSeek's own inference code
  /// (`apply_rotary_emb`, `torch.view_as_complex` over consecutive pairs) and Hugging Face's
  /// `rope_interleave = True` rotate pairs \f$ (2i, 2i+1) \f$: interleaved is the layout the
  /// checkpoints are trained with. (Hugging Face's older DeepSeek code permutes the coordinates into
  /// `rotate_half`'s half-split order first; scores are unchanged since q and k are permuted alike.)
  RopeLayout rope_layout = RopeLayout::interleaved;
};

/// @ingroup ch05
/// The three DeepSeek layers below take their sizes from the named models of model_config.hpp
/// (`named_model_config("deepseek-v2")` ...), where each is written once with its source.
///
/// DeepSeek-V2 (DeepSeek-V2 report, section 3.1.2; `config.json` of deepseek-ai/DeepSeek-V2):
/// \f$ d = 5120, n_h = 128, d_c' = 1536, d_c = 512, d_h = 128, d_h^R = 64, d_v = 128 \f$, 60 layers.
MlaConfig deepseek_v2_mla();
/// @ingroup ch05
/// DeepSeek-V2-Lite (`config.json` of deepseek-ai/DeepSeek-V2-Lite): \f$ d = 2048, n_h = 16 \f$,
/// no query compression (`q_lora_rank: null`), \f$ d_c = 512, d_h = 128, d_h^R = 64, d_v = 128 \f$,
/// 27 layers.
MlaConfig deepseek_v2_lite_mla();
/// @ingroup ch05
/// DeepSeek-V3 (DeepSeek-V3 report, section 4.2; `config.json` of deepseek-ai/DeepSeek-V3):
/// \f$ d = 7168, n_h = 128, d_c' = 1536, d_c = 512, d_h = 128, d_h^R = 64, d_v = 128 \f$, 61 layers.
MlaConfig deepseek_v3_mla();

/// Checks an MLA configuration for `function`: every width positive, `q_lora_rank` positive when
/// given, `qk_rope_head_dim` even, `rms_norm_eps` >= 0 and finite, `rope_theta` > 1; throws
/// `tvlab::Error` naming the field.
void validate_mla_config(const char* function, const MlaConfig& cfg);

/// The chapter 02 RoPE configuration of MLA's decoupled part: head_dim \f$ d_h^R \f$, base `rope_theta`.
RopeConfig mla_rope_config(const MlaConfig& cfg);

/// @ingroup ch05
/// The softmax scale of MLA: \f$ 1/\sqrt{d_h + d_h^R} \f$, the width of the concatenated
/// \f$ [q^C; q^R] \cdot [k^C; k^R] \f$ (DeepSeek-V2, eq. 17; `qk_head_dim ** -0.5` in the code).
double mla_softmax_scale(const MlaConfig& cfg);

/// @ingroup ch05
/// The weights of one MLA layer, stored so that a projection is \f$ y = x W \f$ (rows are tokens),
/// named after the paper's matrices (their Hugging Face modules in brackets):
/// - `w_dq` `[d, d_c']` \f$ W^{DQ} \f$ (`q_a_proj`) and `q_norm` `[d_c']` (`q_a_layernorm`'s gain); both empty without query compression;
/// - `w_uq` `[q_in, n_h d_h]` \f$ W^{UQ} \f$ and `w_qr` `[q_in, n_h d_h^R]` \f$ W^{QR} \f$ (together `q_b_proj`, or `q_proj`
///   without compression), where `q_in` is \f$ d_c' \f$, or \f$ d \f$ without query compression; head i owns columns
///   \f$ [i d_h, (i+1) d_h) \f$ (and \f$ [i d_h^R, (i+1) d_h^R) \f$);
/// - `w_dkv` `[d, d_c]` \f$ W^{DKV} \f$ and `w_kr` `[d, d_h^R]` \f$ W^{KR} \f$ (together `kv_a_proj_with_mqa`), `kv_norm`
///   `[d_c]` (`kv_a_layernorm`'s gain);
/// - `w_uk` `[d_c, n_h d_h]` \f$ W^{UK} \f$ and `w_uv` `[d_c, n_h d_v]` \f$ W^{UV} \f$ (together `kv_b_proj`);
/// - `w_o` `[n_h d_v, d]` \f$ W^O \f$ (`o_proj`).
struct MlaWeights {
  Tensor2 w_dq;     ///< \f$ W^{DQ} \f$ `[d, d_c']`, empty without query compression
  Tensor1 q_norm;   ///< RMSNorm gain of \f$ c^Q \f$ `[d_c']`, empty without query compression
  Tensor2 w_uq;     ///< \f$ W^{UQ} \f$ `[q_in, n_h d_h]`
  Tensor2 w_qr;     ///< \f$ W^{QR} \f$ `[q_in, n_h d_h^R]`
  Tensor2 w_dkv;    ///< \f$ W^{DKV} \f$ `[d, d_c]`
  Tensor1 kv_norm;  ///< RMSNorm gain of \f$ c^{KV} \f$ `[d_c]`
  Tensor2 w_kr;     ///< \f$ W^{KR} \f$ `[d, d_h^R]`
  Tensor2 w_uk;     ///< \f$ W^{UK} \f$ `[d_c, n_h d_h]`
  Tensor2 w_uv;     ///< \f$ W^{UV} \f$ `[d_c, n_h d_v]`
  Tensor2 w_o;      ///< \f$ W^O \f$ `[n_h d_v, d]`
};

/// Checks the weights' shapes against `cfg` (and that they are finite) for `function`, naming the
/// weight and the dimension: `mla_naive: w_uk has columns 30, expected 32 (num_heads * qk_nope_head_dim)`.
void validate_mla_weights(const char* function, const MlaWeights& w, const MlaConfig& cfg);

/// @ingroup ch05
/// What an MLA cache stores, one of the two paths of `tvlab/ref/mla.hpp`.
enum class MlaPath {
  naive,     ///< every head's key \f$ [k^C_{t,i}; k^R_t] \f$ and value \f$ v^C_{t,i} \f$, expanded
  absorbed,  ///< only the latent \f$ c^{KV}_t \f$ and the shared RoPE key \f$ k^R_t \f$
};

/// "naive" or "absorbed", for messages.
std::string to_string(MlaPath path);

/// @ingroup ch05
/// The KV cache of one MLA layer for one sequence: position t of the sequence is row t. A naive
/// cache fills `keys` and `values`, an absorbed one `latents` and `rope_keys`; the other pair stays
/// empty. The functions of `tvlab/ref/mla.hpp` append the new tokens' rows, and leave the cache
/// unchanged when they throw.
struct MlaCache {
  /// A cache for `path`, holding no token yet, shaped for `cfg`.
  MlaCache(const MlaConfig& cfg, MlaPath path);

  MlaPath path;       ///< which path fills it
  Tensor3 keys;       ///< naive: `[n_h, tokens, d_h + d_h^R]`, \f$ [k^C_{t,i}; k^R_t] \f$ (RoPE applied)
  Tensor3 values;     ///< naive: `[n_h, tokens, d_v]`
  Tensor2 latents;    ///< absorbed: `[tokens, d_c]`, \f$ c^{KV}_t \f$ after its RMSNorm
  Tensor2 rope_keys;  ///< absorbed: `[tokens, d_h^R]`, \f$ k^R_t \f$ (RoPE applied)

  /// The number of positions held.
  std::size_t tokens() const;
  /// The number of floats held: tokens times `mla_cache_floats_per_token`.
  std::size_t floats() const;
};

/// @ingroup ch05
/// The numbers one layer caches per token:
/// - naive: \f$ n_h (d_h + d_h^R) + n_h d_v \f$ (every head's key and value, the shared \f$ k^R \f$ copied into each head);
/// - absorbed: \f$ d_c + d_h^R \f$ (DeepSeek-V2, section 2.1.3 and Table 1: \f$ (d_c + d_h^R)\,l \f$ for \f$ l \f$ layers),
///   `analysis::mla_kv_elements_per_token` of the calculators.
std::size_t mla_cache_floats_per_token(const MlaConfig& cfg, MlaPath path);

/// @ingroup ch05
/// Bytes one layer caches per token: `mla_cache_floats_per_token` times `bytes_per_element`
/// (2 for FP16/BF16). Throws when `bytes_per_element` is not positive.
double mla_cache_bytes_per_token(const MlaConfig& cfg, MlaPath path, double bytes_per_element);

}  // namespace tvlab
