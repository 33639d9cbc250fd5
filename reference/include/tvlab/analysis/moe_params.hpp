#pragma once
/// @file
/// Chapter 09, how many parameters a mixture-of-experts model has and how many a token uses: the
/// total and the active count by component, from the model's Hugging Face config.json, and the
/// memory of its experts at a number of bits per weight.
///
/// Every expert is a SwiGLU FFN of width F (gate, up and down projections, no biases:
/// transformers' `MixtralBlockSparseTop2MLP`, `DeepseekV3MLP`, `Qwen2MoeMLP`, `Llama4TextExperts`):
/// \f$ 3 d F \f$ parameters. An MoE layer with E routed experts of width \f$ F_e \f$
/// (`moe_intermediate_size`; Mixtral's `intermediate_size`), shared experts of total width \f$ F_s \f$
/// and a router \f$ W_g \in \mathbb{R}^{d \times E} \f$ holds
/// \f[ \underbrace{E \cdot 3 d F_e}_{\text{routed}} + \underbrace{3 d F_s}_{\text{shared}} + \underbrace{d E}_{\text{router}}, \f]
/// of which a token uses \f$ k \cdot 3 d F_e + 3 d F_s + d E \f$ (k = `num_experts_per_tok`). A dense
/// layer has one FFN of width F (`intermediate_size`; Llama 4's `intermediate_size_mlp`).
///
/// Which layers are MoE (0-based index i of L): \f$ i \ge \f$ `first_k_dense_replace` (DeepSeek's
/// modeling_deepseek.py: the first k layers are dense) and \f$ (i + 1) \bmod s = 0 \f$ with s =
/// `decoder_sparse_step` (transformers' modeling_qwen2_moe.py) or `interleave_moe_layer_step`
/// (modeling_llama4.py builds `moe_layers` as every s-th layer, the last of each group).
///
/// Attention is GQA, \f$ d\,h d_h + 2\,d\,g d_h + h d_h\, d \f$ (plus biases on Q, K, V for Qwen2), or
/// DeepSeek's Multi-head Latent Attention (DeepSeek-V2, arXiv:2405.04434, section 2.1; transformers'
/// `DeepseekV3Attention`) with latent ranks \f$ d'_c \f$ (q_lora_rank), \f$ d_c \f$ (kv_lora_rank),
/// head widths \f$ d_h \f$ (qk_nope_head_dim), \f$ d_h^R \f$ (qk_rope_head_dim), \f$ d_v \f$ (v_head_dim):
/// \f[ \underbrace{d\, d'_c + d'_c\, h (d_h + d_h^R)}_{W^{DQ},\ W^{UQ}, W^{QR}} + \underbrace{d\,(d_c + d_h^R)}_{W^{DKV},\ W^{KR}} + \underbrace{d_c\, h (d_h + d_v)}_{W^{UK}, W^{UV}} + \underbrace{h d_v\, d}_{W^O}, \f]
/// (without a query latent, \f$ d'_c = 0 \f$, the queries take \f$ d\, h (d_h + d_h^R) \f$).
///
/// Norms: two RMSNorm gains of d per layer and a final one; MLA adds its latents' norms
/// (\f$ d'_c + d_c \f$ per layer), Qwen3 its per-head query and key norms (\f$ 2 d_h \f$). Routers:
/// \f$ d E \f$, plus E selection biases for DeepSeek-V3 (`e_score_correction_bias`), plus Qwen2-MoE's
/// shared-expert gate (d). The embedding \f$ V d \f$ and the output layer \f$ V d \f$ (0 when tied).
///
/// Not counted: DeepSeek-V3's multi-token-prediction (MTP) module, which its published 671B excludes
/// (DeepSeek-V3 report, arXiv:2412.19437, section 2.2: the MTP module shares the embedding and the
/// output head, and adds a projection \f$ M \in \mathbb{R}^{d \times 2d} \f$, two RMSNorms and one
/// Transformer block; `mtp_parameters` counts it; the repository's README_WEIGHTS.md gives
/// 685B = 671B + 14B, its 14B counting the shared embedding and head a second time), and Llama 4's
/// vision encoder (its published 109B and 400B are of the whole multimodal model).

#include <string>
#include <vector>

namespace tvlab::analysis {

/// @ingroup ch09
/// A mixture-of-experts decoder's shape, in Hugging Face's config names.
struct MoeShape {
  std::string name;
  long long hidden_size = 0;          ///< d
  long long num_hidden_layers = 0;    ///< L
  long long num_attention_heads = 0;  ///< h
  long long num_key_value_heads = 0;  ///< g (h for MLA, whose heads each get their own key and value)
  long long head_dim = 0;             ///< \f$ d_h \f$ of a GQA head (unused by MLA)
  long long vocab_size = 0;           ///< V
  bool tie_word_embeddings = false;   ///< the output layer is the embedding
  long long intermediate_size = 0;       ///< F of a dense layer's FFN (0 when every layer is MoE)
  long long moe_intermediate_size = 0;   ///< \f$ F_e \f$ of one routed expert
  long long num_experts = 0;             ///< E, routed experts per MoE layer
  long long num_experts_per_tok = 0;     ///< k, routed experts a token uses
  long long shared_intermediate_size = 0;  ///< \f$ F_s \f$: n_shared_experts x moe_intermediate_size, or Qwen's shared_expert_intermediate_size
  long long first_k_dense_replace = 0;     ///< the first layers are dense (DeepSeek)
  long long moe_layer_step = 1;            ///< every s-th layer is MoE (Qwen's decoder_sparse_step, Llama 4's interleave_moe_layer_step)
  long long q_lora_rank = 0;        ///< MLA: \f$ d'_c \f$ (0: queries not compressed)
  long long kv_lora_rank = 0;       ///< MLA: \f$ d_c \f$ (0: not MLA)
  long long qk_nope_head_dim = 0;   ///< MLA: \f$ d_h \f$
  long long qk_rope_head_dim = 0;   ///< MLA: \f$ d_h^R \f$
  long long v_head_dim = 0;         ///< MLA: \f$ d_v \f$
  bool qkv_bias = false;            ///< biases on Q, K, V (Qwen2)
  bool qk_norm = false;             ///< per-head RMSNorm gains on queries and keys (Qwen3)
  bool router_bias = false;         ///< a selection bias per expert (DeepSeek-V3's e_score_correction_bias)
  bool shared_expert_gate = false;  ///< a sigmoid gate \f$ \mathbb{R}^{d \to 1} \f$ on the shared expert (Qwen2-MoE)
  long long num_nextn_predict_layers = 0;  ///< DeepSeek-V3's MTP modules (not in the totals)
  std::string source;               ///< where the numbers come from

  /// True for Multi-head Latent Attention.
  bool is_mla() const { return kv_lora_rank > 0; }
};

/// @ingroup ch09
/// mixtral-8x7b, mixtral-8x22b, deepseek-v2, deepseek-v3, qwen2-57b-a14b, qwen3-30b-a3b,
/// qwen3-235b-a22b, llama-4-scout, llama-4-maverick (their config.json files, cited in `source`).
const std::vector<MoeShape>& moe_shapes();

/// @ingroup ch09
/// The shape called `name`; an error naming `name` and listing the known names otherwise.
const MoeShape& moe_shape(const std::string& name);

/// @ingroup ch09
/// Reads a Hugging Face config.json (a Llama 4 file's `text_config` object when present):
/// hidden_size, num_hidden_layers, num_attention_heads, vocab_size, the routed experts
/// (`num_local_experts`, `n_routed_experts` or `num_experts`), num_experts_per_tok and the expert width
/// (`moe_intermediate_size`, or `intermediate_size` for Mixtral and Llama 4, whose dense layers take
/// `intermediate_size_mlp`) are required; num_key_value_heads (default h), head_dim (default d / h),
/// tie_word_embeddings (false), `n_shared_experts` or `shared_expert_intermediate_size` (0; Llama 4
/// has one shared expert of the expert width), first_k_dense_replace (0), decoder_sparse_step or
/// interleave_moe_layer_step (1), the MLA ranks (0) are optional; `mlp_only_layers`, when not empty,
/// is refused (not modelled). The model_type picks the details: "qwen2_moe" has Q, K, V biases and a
/// shared-expert gate, "qwen3_moe" query and key norms, "deepseek_v3" the selection bias. A missing
/// file, bad JSON, a missing required key (named) or a key of the wrong type throws `tvlab::Error`;
/// then `validate_moe_shape`.
MoeShape read_moe_config(const std::string& path);

/// @ingroup ch09
/// Checks a shape: positive sizes (named), h a multiple of g, \f$ 1 \le k < E \f$, MLA's head widths
/// positive when kv_lora_rank is, a dense width when some layer is dense, at least one MoE layer.
void validate_moe_shape(const char* function, const MoeShape& shape);

/// @ingroup ch09
/// Whether layer i (0-based) is an MoE layer (the rule above). Errors: i outside [0, L).
bool is_moe_layer(const MoeShape& shape, long long layer);

/// @ingroup ch09
/// Parameters by component (a count over the whole model, or over what one token uses).
struct MoeParameters {
  long long embedding = 0;       ///< \f$ V d \f$
  long long attention = 0;       ///< every layer's Q, K, V, O (MLA: its down- and up-projections), biases included
  long long routers = 0;         ///< every MoE layer's \f$ W_g \f$, selection biases, shared-expert gates
  long long routed_experts = 0;  ///< E (or k, when active) experts per MoE layer
  long long shared_experts = 0;  ///< the always-on shared experts
  long long dense_ffn = 0;       ///< the dense layers' FFNs
  long long norms = 0;           ///< every RMSNorm gain, the final one included
  long long output = 0;          ///< \f$ V d \f$, 0 when tied to the embedding
  long long total() const {
    return embedding + attention + routers + routed_experts + shared_experts + dense_ffn + norms + output;
  }
  /// Everything but the embedding table (a token reads one row of it).
  long long without_embedding() const { return total() - embedding; }
};

/// @ingroup ch09
/// Every parameter of the model (MTP and vision encoders excluded, see the file's comment).
MoeParameters moe_total_parameters(const MoeShape& shape);

/// @ingroup ch09
/// What one token uses: the same, with k routed experts per MoE layer instead of E. The embedding is
/// counted whole, as Mistral's 12.9B for Mixtral counts it; `without_embedding()` is the other
/// convention.
MoeParameters moe_active_parameters(const MoeShape& shape);

/// @ingroup ch09
/// One routed expert's parameters in one layer, \f$ 3 d F_e \f$, and across the MoE layers (what
/// "an expert of 2.55B" means for DeepSeek-V3: 58 layers of 44M).
long long expert_parameters_per_layer(const MoeShape& shape);
/// @ingroup ch09
/// \f$ 3 d F_e \f$ times the number of MoE layers.
long long expert_parameters_across_layers(const MoeShape& shape);
/// @ingroup ch09
/// The number of MoE layers.
long long moe_layer_count(const MoeShape& shape);

/// @ingroup ch09
/// DeepSeek-V3's MTP module(s): per module the projection \f$ 2d \cdot d \f$, two RMSNorms (2d), one MoE
/// Transformer block and its output norm (d); the embedding and the output head are shared (not
/// counted). 0 when num_nextn_predict_layers is 0.
long long mtp_parameters(const MoeShape& shape);

/// @ingroup ch09
/// Bytes of `parameters` weights at `bits_per_weight` (16 for BF16, 8 for FP8, 4.5 for ggml's Q4_K,
/// 8.5 for Q8_0): \f$ N b / 8 \f$. Errors: bits not positive or not finite, parameters negative.
double parameter_bytes(long long parameters, double bits_per_weight);

/// @ingroup ch09
/// A number of bits per weight by name: bf16, fp16 (16), fp8 (8), int4 (4), or a ggml type (Q4_K,
/// Q8_0, ... from `tvlab/core/ggml_blocks.hpp`: its block bytes x 8 / its block size); an error listing
/// the names otherwise.
double format_bits(const std::string& name);

/// @ingroup ch09
/// Capacity of an expert: \f$ \lceil T/E \cdot c \rceil \f$ tokens (GShard, Switch Transformer eq. 3)
/// for T tokens, E experts and capacity factor c. Errors: T, E not positive, c not positive.
long long expert_capacity(long long tokens, long long num_experts, double capacity_factor);

}  // namespace tvlab::analysis
