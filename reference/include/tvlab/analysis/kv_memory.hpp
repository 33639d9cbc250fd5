#pragma once
/// @file
/// Chapter 05: what the KV cache costs. During decoding every layer keeps, for every past token,
/// what later queries need: the keys and values of its key-value heads (MHA, MQA, GQA), a latent
/// vector (MLA) or the factors of a low-rank product (TPA). Elements cached per token per layer:
/// - MHA / MQA / GQA with \f$ g \f$ key-value heads of width \f$ d_h \f$: \f$ 2 g d_h \f$
///   (K and V; \f$ g = h \f$ is MHA, \f$ g = 1 \f$ MQA);
/// - MLA: \f$ d_c + d_h^R \f$ (the latent \f$ c^{KV} \f$ and the decoupled RoPE key, shared by all heads);
/// - TPA with ranks \f$ R_K, R_V \f$: \f$ (R_K + R_V)(h + d_h) \f$ (each rank-1 term caches a head
///   factor of length \f$ h \f$ and a token factor of length \f$ d_h \f$).
///
/// Then bytes = elements x bytes per element x layers x tokens x batch:
/// \f$ 2 L g d_h S B b \f$ for GQA. Sizes are `double` byte counts (exact integers up to \f$ 2^{53} \f$).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tvlab/analysis/attention_cost.hpp"
#include "tvlab/core/kv_heads.hpp"
#include "tvlab/core/model_config.hpp"

namespace tvlab::analysis {

/// The storage format (`DType` of attention_cost.hpp, with its bytes per element) of a `config.json`
/// torch_dtype: "float32", "float16", "bfloat16"; also "fp8", "float8_e4m3fn", "float8_e5m2", "int8",
/// "int4" and the short names of `dtype_name`; `tvlab::Error` naming `torch_dtype` otherwise.
/// @ingroup ch05
DType dtype_from_torch_dtype(const std::string& torch_dtype);

/// \f$ 2 g d_h \f$: K and V of each of the `num_kv_heads` key-value heads, for one token in one layer.
/// `num_heads` (\f$ h \f$) must be a positive multiple of `num_kv_heads` (\f$ g \f$); `head_dim` > 0.
/// @ingroup ch05
double gqa_kv_elements_per_token(long long num_heads, long long num_kv_heads, long long head_dim);

/// \f$ d_c + d_h^R \f$: the MLA latent (`kv_lora_rank`) and the decoupled RoPE key
/// (`qk_rope_head_dim`, >= 0; 0 shows the latent alone), one token, one layer.
/// @ingroup ch05
double mla_kv_elements_per_token(long long kv_lora_rank, long long qk_rope_head_dim);

/// \f$ (R_K + R_V)(h + d_h) \f$: the TPA factors \f$ a_r \in \mathbb{R}^h \f$, \f$ b_r \in \mathbb{R}^{d_h} \f$
/// of the key (`rank_k` terms) and the value (`rank_v` terms), one token, one layer
/// (Zhang et al. 2025, "Tensor Product Attention Is All You Need", arXiv:2501.06425, section 3).
/// @ingroup ch05
double tpa_kv_elements_per_token(long long rank_k, long long rank_v, long long num_heads, long long head_dim);

/// Elements cached per token per layer by a model: MLA's \f$ d_c + d_h^R \f$ when `config.is_mla()`,
/// otherwise \f$ 2 g d_h \f$. The config is checked (`validate_model_config`).
/// @ingroup ch05
double model_kv_elements_per_token(const ModelConfig& config);

/// The KV cache of `batch` sequences of `seq_len` tokens through `num_layers` layers.
/// @ingroup ch05
struct KvCacheSize {
  double elements_per_token_per_layer = 0;  ///< \f$ e \f$ (\f$ 2 g d_h \f$, \f$ d_c + d_h^R \f$, ...)
  double bytes_per_token_per_layer = 0;     ///< \f$ e\, b \f$
  double bytes_per_token = 0;               ///< \f$ e\, b\, L \f$: one token through all layers
  double bytes_per_layer = 0;               ///< \f$ e\, b\, S \f$: one layer of one sequence
  double bytes_per_sequence = 0;            ///< \f$ e\, b\, L\, S \f$
  double bytes_total = 0;                   ///< \f$ e\, b\, L\, S\, B \f$
};

/// The sizes for `elements_per_token_per_layer` (> 0) in `dtype`; `num_layers`, `seq_len`,
/// `batch` >= 1. `tvlab::Error` naming the parameter otherwise.
/// @ingroup ch05
KvCacheSize kv_cache_size(double elements_per_token_per_layer, long long num_layers, long long seq_len,
                          long long batch, DType dtype);

/// The sizes for a model (`model_kv_elements_per_token`, `config.num_hidden_layers` layers).
/// @ingroup ch05
KvCacheSize kv_cache_size(const ModelConfig& config, long long seq_len, long long batch, DType dtype);

/// "Dynamic GQA": layer \f$ \ell \f$ keeps \f$ g_\ell \f$ key-value heads, so the cache is
/// \f$ \sum_\ell 2 g_\ell d_h\, S B b \f$. Every entry of `num_kv_heads_per_layer` (one per layer,
/// not empty) must divide `num_heads`; the error names the entry's layer.
/// @ingroup ch05
double per_layer_gqa_kv_bytes(const std::vector<long long>& num_kv_heads_per_layer, long long num_heads,
                              long long head_dim, long long seq_len, long long batch, DType dtype);

/// \f$ \lceil (\text{kv} + \text{weights}) / \text{gpu} \rceil \f$: how many GPUs of `gpu_bytes`
/// (default 80 GB = \f$ 80 \times 10^9 \f$ bytes) hold `kv_bytes` (> 0) plus `weight_bytes` (>= 0),
/// counting memory only (no activations, no fragmentation, no parallelism overheads).
/// `tvlab::Error` naming `kv_bytes` when the count reaches \f$ 2^{63} \f$ (beyond `long long`).
/// @ingroup ch05
long long gpus_needed(double kv_bytes, double weight_bytes = 0, double gpu_bytes = 80e9);

/// \f$ \lfloor (\text{gpus} \cdot \text{gpu} - \text{weights}) / \text{per sequence} \rfloor \f$: the
/// sequences whose caches fit beside the weights (0 when the weights alone do not fit).
/// `tvlab::Error` naming `bytes_per_sequence` when the count reaches \f$ 2^{63} \f$ (beyond `long long`).
/// @ingroup ch05
long long sequences_that_fit(double bytes_per_sequence, double weight_bytes, long long num_gpus,
                             double gpu_bytes = 80e9);

/// What each of `tp_size` tensor-parallel GPUs holds of a layer's \f$ g \f$ key-value heads. The
/// query heads are split evenly (\f$ h / t \f$ per GPU). When \f$ g \ge t \f$ each GPU owns
/// \f$ g / t \f$ kv heads (\f$ t \f$ must divide \f$ g \f$): Megatron-LM's attention computes
/// `num_query_groups_per_partition = divide(num_query_groups, world_size)`, which asserts exact
/// division, so Megatron-LM supports only this case. When \f$ g < t \f$ each GPU holds one kv head,
/// the one its query heads use, replicated on \f$ t / g \f$ GPUs (\f$ g \f$ must divide \f$ t \f$):
/// vLLM's `QKVParallelLinear` (vllm/model_executor/layers/linear.py) sets num_kv_heads = 1 and
/// num_kv_head_replicas = tp_size / total_num_kv_heads when tp_size >= total_num_kv_heads, and
/// num_kv_heads = total_num_kv_heads / tp_size otherwise. Each GPU computes its own heads' K and V
/// from the (replicated) layer input, so the KV cache itself is never sent between GPUs.
/// @ingroup ch05
struct TensorParallelKv {
  long long kv_heads_per_gpu = 0;  ///< \f$ \max(1, g / t) \f$
  long long replicas = 0;          ///< GPUs holding each kv head: 1, or \f$ t / g \f$ when \f$ g < t \f$
  long long query_heads_per_gpu = 0;  ///< \f$ h / t \f$
  /// The KV elements per token per layer one GPU holds: \f$ 2\, (\text{kv heads per GPU})\, d_h \f$.
  double elements_per_token_per_gpu = 0;
};

/// The split for `num_heads` (\f$ h \f$, a multiple of `tp_size`), `num_kv_heads` (\f$ g \f$), `head_dim`
/// and `tp_size` (\f$ t \f$ >= 1). `tvlab::Error` naming the parameter when a split is impossible.
/// @ingroup ch05
TensorParallelKv tensor_parallel_kv(long long num_heads, long long num_kv_heads, long long head_dim,
                                    long long tp_size);

/// The documents' fraction of the attention K/V activations kept for the backward pass that GQA saves
/// against MHA, \f$ 1 - g/h \f$ (004 L63).
/// @ingroup ch05
double gqa_kv_activation_saving(long long num_heads, long long num_kv_heads);

/// The documents' MLA saving \f$ 1 - d_c / (h\, d_h) \f$ (004 L63): a latent of \f$ d_c \f$ values
/// against \f$ h d_h \f$ per K (or V). MLA training still materializes the up-projected K and V, so
/// this bounds what caching the latent instead could save.
/// @ingroup ch05
double mla_kv_activation_saving(long long kv_lora_rank, long long num_heads, long long head_dim);

/// Activation bytes one Transformer layer stores for the backward pass with 16-bit activations,
/// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
/// arXiv:2205.05198, eq. (1): \f$ s b h (34 + 5 a s / h) \f$ without recomputation; with full
/// activation checkpointing (`checkpointed`) only the layer input, \f$ 2 s b h \f$.
/// @param seq_len \f$ s \f$; @param batch \f$ b \f$; @param hidden_size \f$ h \f$; @param num_heads \f$ a \f$.
/// @param checkpointed true: full recomputation, only the input of the layer is kept.
/// @ingroup ch05
double layer_activation_bytes(long long seq_len, long long batch, long long hidden_size, long long num_heads,
                              bool checkpointed);

/// @ingroup ch05
/// Projection multiply-adds of one layer generating `new_tokens` tokens after a prompt of
/// `prompt_length` tokens (\f$ p \f$ and \f$ n \f$ below; \f$ d \f$ = `d_model`, \f$ d_k \f$ =
/// `head_dim`), in closed form. Each token's query and output projections cost \f$ 2 d\,h\,d_k \f$,
/// each key and value projection \f$ 2 d\,g\,d_k \f$; the prompt is one causal pass
/// (\f$ p \cdot 2 d\, d_k (h + g) \f$) either way. Then, per generated token at position
/// \f$ s = p + 1 \dots p + n \f$ (counting from 1):
/// - with a cache (`decode`): \f$ 2 d\, d_k (h + g) \f$, in total \f$ (p + n)\cdot 2 d\, d_k (h + g) \f$;
/// - without (`decode_without_cache` over the \f$ s \f$ tokens): \f$ 2 d\,h\,d_k + 2 s\, d\, g\, d_k \f$,
///   in total \f$ p \cdot 2 d\, d_k (h + g) + 2 d\,h\,d_k\, n + 2 d\, g\, d_k \big(n p + n(n+1)/2\big) \f$:
///   \f$ \Theta(n^2 d^2) \f$ for \f$ g\,d_k \propto d \f$, against \f$ \Theta(n\, d^2) \f$ with the cache.
/// Throws `tvlab::Error` naming the parameter for a zero size, heads that `validate_kv_heads`
/// rejects, and a count beyond 64 bits.
/// @param prompt_length \f$ p \ge 1 \f$
/// @param new_tokens \f$ n \ge 0 \f$
/// @param d_model \f$ d \f$
/// @param heads \f$ h \f$ and \f$ g \f$
/// @param head_dim \f$ d_k \f$
/// @param with_cache whether the keys and values of earlier tokens are kept
std::uint64_t decode_projection_macs(std::size_t prompt_length, std::size_t new_tokens, std::size_t d_model,
                                     const KvHeads& heads, std::size_t head_dim, bool with_cache);


}  // namespace tvlab::analysis
