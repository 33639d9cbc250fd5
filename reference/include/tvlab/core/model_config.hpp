#pragma once
/// @file
/// The attention shape of a model, as its Hugging Face `config.json` states it (chapter 05): layers,
/// heads, key-value heads, head width, and for Multi-head Latent Attention (MLA) the latent ranks.
/// These are the numbers the KV-cache calculators (`tvlab/analysis/kv_memory.hpp`) need. A few
/// published models are built in (`named_model_configs`), each with the source of its numbers.

#include <string>
#include <string_view>
#include <vector>

namespace tvlab {

/// The attention-relevant fields of a model's `config.json`, named as Hugging Face names them.
/// Paper symbols: \f$ L \f$ = num_hidden_layers, \f$ d \f$ = hidden_size, \f$ h \f$ =
/// num_attention_heads, \f$ g \f$ = num_key_value_heads, \f$ d_h \f$ = head_dim, \f$ d_c \f$ =
/// kv_lora_rank, \f$ d'_c \f$ = q_lora_rank, \f$ d_h^R \f$ = qk_rope_head_dim.
/// @ingroup ch05
struct ModelConfig {
  std::string name;                ///< "llama-2-70b", or the file a config was read from
  long long num_hidden_layers = 0;    ///< \f$ L \f$
  long long hidden_size = 0;          ///< \f$ d \f$ (d_model)
  long long num_attention_heads = 0;  ///< \f$ h \f$, query heads
  long long num_key_value_heads = 0;  ///< \f$ g \f$: \f$ h \f$ for MHA, 1 for MQA, in between for GQA
  long long head_dim = 0;             ///< \f$ d_h \f$ of a query/key/value head (hidden_size / heads by default)
  /// MLA only (0 for a model without MLA): the width \f$ d_c \f$ of the cached latent \f$ c^{KV} \f$.
  long long kv_lora_rank = 0;
  long long q_lora_rank = 0;       ///< MLA: \f$ d'_c \f$ of the query latent; 0 when queries are not compressed
  long long qk_rope_head_dim = 0;  ///< MLA: \f$ d_h^R \f$, the decoupled RoPE key (one per token, shared by the heads)
  long long qk_nope_head_dim = 0;  ///< MLA: the content part of a query/key head
  long long v_head_dim = 0;        ///< MLA: the width of a value head
  std::string torch_dtype;         ///< "bfloat16", "float16" ...; empty when the file does not say
  std::string source;              ///< where the numbers come from (a config.json address, a paper)

  /// True for Multi-head Latent Attention (DeepSeek-V2/V3): the cache holds \f$ c^{KV} \f$ and \f$ k^R \f$.
  bool is_mla() const { return kv_lora_rank > 0; }
  /// \f$ h / g \f$: query heads per key-value head (of a validated config: g > 0 divides h).
  long long group_size() const { return num_attention_heads / num_key_value_heads; }
};

/// Checks a config: positive layers, hidden size, heads, kv heads and head_dim; num_attention_heads a
/// multiple of num_key_value_heads; for MLA, positive qk_rope_head_dim and no negative rank.
/// Throws `tvlab::Error` whose message starts with `function` and names the field.
/// @ingroup ch05
void validate_model_config(std::string_view function, const ModelConfig& config);

/// Reads a Hugging Face `config.json`: `num_hidden_layers`, `hidden_size`, `num_attention_heads`
/// (required), `num_key_value_heads` (absent or null: MHA, equal to the heads), `head_dim` (absent
/// or null: hidden_size / num_attention_heads), `kv_lora_rank`, `q_lora_rank`, `qk_rope_head_dim`,
/// `qk_nope_head_dim`, `v_head_dim` (absent or null: 0), `torch_dtype` or the newer `dtype`. For an
/// MLA config without `head_dim` (DeepSeek's files have none, and hidden_size / heads = 5120 / 128
/// means nothing there), head_dim is qk_nope_head_dim: the DeepSeek-V2 paper's per-head width
/// $ d_h $ (128), against which its MHA comparison is made. Then `validate_model_config`. A missing file, malformed JSON,
/// a missing required field or a field of the wrong type throws `tvlab::Error` naming the file and
/// the field.
/// @ingroup ch05
ModelConfig read_model_config(const std::string& path);

/// The built-in published configs, each with `source` citing its config.json or paper:
/// llama-2-7b, llama-2-70b, llama-3-8b, llama-3-70b, llama-3.1-405b, mistral-7b, deepseek-v2,
/// deepseek-v2-lite, deepseek-v3.
/// @ingroup ch05
const std::vector<ModelConfig>& named_model_configs();

/// The built-in config called `name` (see `named_model_configs`); `tvlab::Error` naming `name` and
/// listing the known names otherwise.
/// @ingroup ch05
const ModelConfig& named_model_config(std::string_view name);

}  // namespace tvlab
