#include "tvlab/analysis/moe_params.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>

#include "tvlab/core/error.hpp"
#include "tvlab/core/ggml_blocks.hpp"

namespace tvlab::analysis {

namespace {

MoeShape gqa_moe(const char* name, long long d, long long L, long long h, long long g, long long head_dim, long long V,
                 long long expert_width, long long E, long long k, const char* source) {
  MoeShape s;
  s.name = name, s.hidden_size = d, s.num_hidden_layers = L, s.num_attention_heads = h, s.num_key_value_heads = g;
  s.head_dim = head_dim, s.vocab_size = V, s.moe_intermediate_size = expert_width, s.num_experts = E;
  s.num_experts_per_tok = k, s.source = source;
  return s;
}

MoeShape deepseek(const char* name, long long d, long long L, long long V, long long dense_width, long long expert_width,
                  long long E, long long k, long long shared, long long dense_layers, const char* source) {
  MoeShape s = gqa_moe(name, d, L, 128, 128, 128, V, expert_width, E, k, source);
  s.intermediate_size = dense_width, s.shared_intermediate_size = shared * expert_width;
  s.first_k_dense_replace = dense_layers;
  s.q_lora_rank = 1536, s.kv_lora_rank = 512, s.qk_nope_head_dim = 128, s.qk_rope_head_dim = 64, s.v_head_dim = 128;
  return s;
}

std::vector<MoeShape> build_shapes() {
  std::vector<MoeShape> all;
  // huggingface.co/mistralai/Mixtral-8x7B-v0.1 config.json: hidden 4096, 32 layers, 32 heads, 8 kv heads,
  // intermediate_size 14336 (each expert), vocab 32000, num_local_experts 8, num_experts_per_tok 2.
  all.push_back(gqa_moe("mixtral-8x7b", 4096, 32, 32, 8, 128, 32000, 14336, 8, 2,
                        "huggingface.co/mistralai/Mixtral-8x7B-v0.1 config.json"));
  // huggingface.co/mistral-community/Mixtral-8x22B-v0.1 config.json (transformers 4.40): hidden 6144,
  // 56 layers, 48 heads, 8 kv heads, intermediate_size 16384, vocab 32000, 8 experts, top-2.
  all.push_back(gqa_moe("mixtral-8x22b", 6144, 56, 48, 8, 128, 32000, 16384, 8, 2,
                        "huggingface.co/mistral-community/Mixtral-8x22B-v0.1 config.json"));
  // huggingface.co/deepseek-ai/DeepSeek-V2 config.json: hidden 5120, 60 layers, vocab 102400,
  // intermediate_size 12288, moe_intermediate_size 1536, n_routed_experts 160, num_experts_per_tok 6,
  // n_shared_experts 2, first_k_dense_replace 1, MLA ranks 1536 / 512, heads 128 of 128 + 64, v 128.
  all.push_back(deepseek("deepseek-v2", 5120, 60, 102400, 12288, 1536, 160, 6, 2, 1,
                         "huggingface.co/deepseek-ai/DeepSeek-V2 config.json; arXiv:2405.04434"));
  // huggingface.co/deepseek-ai/DeepSeek-V3 config.json: hidden 7168, 61 layers, vocab 129280,
  // intermediate_size 18432, moe_intermediate_size 2048, n_routed_experts 256, num_experts_per_tok 8,
  // n_shared_experts 1, first_k_dense_replace 3, num_nextn_predict_layers 1, same MLA shape as V2.
  all.push_back(deepseek("deepseek-v3", 7168, 61, 129280, 18432, 2048, 256, 8, 1, 3,
                         "huggingface.co/deepseek-ai/DeepSeek-V3 config.json; arXiv:2412.19437"));
  all.back().router_bias = true, all.back().num_nextn_predict_layers = 1;
  // huggingface.co/Qwen/Qwen2-57B-A14B config.json: hidden 3584, 28 layers, 28 heads, 4 kv heads,
  // vocab 151936, moe_intermediate_size 2560, shared_expert_intermediate_size 20480, 64 experts, top-8.
  MoeShape qwen2 = gqa_moe("qwen2-57b-a14b", 3584, 28, 28, 4, 128, 151936, 2560, 64, 8,
                           "huggingface.co/Qwen/Qwen2-57B-A14B config.json");
  qwen2.shared_intermediate_size = 20480, qwen2.qkv_bias = true, qwen2.shared_expert_gate = true;
  all.push_back(qwen2);
  // huggingface.co/Qwen/Qwen3-30B-A3B config.json: hidden 2048, 48 layers, 32 heads, 4 kv heads,
  // head_dim 128, vocab 151936, moe_intermediate_size 768, 128 experts, top-8, untied.
  all.push_back(gqa_moe("qwen3-30b-a3b", 2048, 48, 32, 4, 128, 151936, 768, 128, 8,
                        "huggingface.co/Qwen/Qwen3-30B-A3B config.json"));
  all.back().qk_norm = true;
  // huggingface.co/Qwen/Qwen3-235B-A22B config.json: hidden 4096, 94 layers, 64 heads, 4 kv heads,
  // head_dim 128, vocab 151936, moe_intermediate_size 1536, 128 experts, top-8, untied.
  all.push_back(gqa_moe("qwen3-235b-a22b", 4096, 94, 64, 4, 128, 151936, 1536, 128, 8,
                        "huggingface.co/Qwen/Qwen3-235B-A22B config.json"));
  all.back().qk_norm = true;
  // huggingface.co/meta-llama/Llama-4-Scout-17B-16E config.json, text_config: hidden 5120, 48 layers,
  // 40 heads, 8 kv heads, head_dim 128, vocab 202048, intermediate_size 8192 (experts and the shared
  // expert), intermediate_size_mlp 16384 (dense layers), 16 experts, top-1, interleave_moe_layer_step 1.
  MoeShape scout = gqa_moe("llama-4-scout", 5120, 48, 40, 8, 128, 202048, 8192, 16, 1,
                           "huggingface.co/meta-llama/Llama-4-Scout-17B-16E config.json (text_config)");
  scout.shared_intermediate_size = 8192, scout.intermediate_size = 16384;
  all.push_back(scout);
  // huggingface.co/meta-llama/Llama-4-Maverick-17B-128E config.json, text_config: as Scout but 128
  // experts and interleave_moe_layer_step 2 (layers 1, 3, ..., 47 are MoE, the others dense).
  MoeShape maverick = scout;
  maverick.name = "llama-4-maverick", maverick.num_experts = 128, maverick.moe_layer_step = 2;
  maverick.source = "huggingface.co/meta-llama/Llama-4-Maverick-17B-128E config.json (text_config)";
  all.push_back(maverick);
  for (const MoeShape& s : all) validate_moe_shape("moe_shapes", s);
  return all;
}

}  // namespace

const std::vector<MoeShape>& moe_shapes() {
  static const std::vector<MoeShape> all = build_shapes();
  return all;
}

const MoeShape& moe_shape(const std::string& name) {
  std::string known;
  for (const MoeShape& s : moe_shapes()) {
    if (s.name == name) return s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  fail("moe_shape", "name (\"", name, "\") is not a built-in model; known: ", known);
}

void validate_moe_shape(const char* fn, const MoeShape& s) {
  require_positive(fn, "hidden_size", s.hidden_size);
  require_positive(fn, "num_hidden_layers", s.num_hidden_layers);
  require_positive(fn, "num_attention_heads", s.num_attention_heads);
  require_positive(fn, "num_key_value_heads", s.num_key_value_heads);
  require_positive(fn, "vocab_size", s.vocab_size);
  require_positive(fn, "moe_intermediate_size", s.moe_intermediate_size);
  require_positive(fn, "num_experts", s.num_experts);
  require_positive(fn, "num_experts_per_tok", s.num_experts_per_tok);
  require_positive(fn, "moe_layer_step", s.moe_layer_step);
  // k = E would be a dense layer E times wider, not a mixture: the router would choose nothing.
  require(s.num_experts_per_tok < s.num_experts, fn, "num_experts_per_tok (", s.num_experts_per_tok,
          ") must be below num_experts (", s.num_experts, ")");
  require(s.num_attention_heads % s.num_key_value_heads == 0, fn, "num_attention_heads (", s.num_attention_heads,
          ") must be a multiple of num_key_value_heads (", s.num_key_value_heads, ")");
  for (const auto& [name, value] : {std::pair<const char*, long long>{"intermediate_size", s.intermediate_size},
                                    {"shared_intermediate_size", s.shared_intermediate_size},
                                    {"first_k_dense_replace", s.first_k_dense_replace},
                                    {"q_lora_rank", s.q_lora_rank},
                                    {"kv_lora_rank", s.kv_lora_rank},
                                    {"num_nextn_predict_layers", s.num_nextn_predict_layers}})
    require(value >= 0, fn, name, " (", value, ") must not be negative");
  if (s.is_mla()) {
    require_positive(fn, "qk_nope_head_dim (needed by MLA)", s.qk_nope_head_dim);
    require_positive(fn, "qk_rope_head_dim (needed by MLA)", s.qk_rope_head_dim);
    require_positive(fn, "v_head_dim (needed by MLA)", s.v_head_dim);
  } else {
    require_positive(fn, "head_dim", s.head_dim);
  }
  long long moe = 0;
  for (long long i = 0; i < s.num_hidden_layers; ++i)
    moe += (i >= s.first_k_dense_replace && (i + 1) % s.moe_layer_step == 0) ? 1 : 0;
  require(moe > 0, fn, "first_k_dense_replace (", s.first_k_dense_replace, ") and the MoE layer step (",
          s.moe_layer_step, ") leave no MoE layer among ", s.num_hidden_layers);
  require(moe == s.num_hidden_layers || s.intermediate_size > 0, fn, "intermediate_size (", s.intermediate_size,
          ") must be positive: ", s.num_hidden_layers - moe, " layer(s) are dense");
}

bool is_moe_layer(const MoeShape& s, long long i) {
  require(i >= 0 && i < s.num_hidden_layers, "is_moe_layer", "layer (", i, ") must be in [0, ", s.num_hidden_layers,
          ")");
  return i >= s.first_k_dense_replace && (i + 1) % s.moe_layer_step == 0;
}

long long moe_layer_count(const MoeShape& s) {
  validate_moe_shape("moe_layer_count", s);
  long long n = 0;
  for (long long i = 0; i < s.num_hidden_layers; ++i) n += is_moe_layer(s, i) ? 1 : 0;
  return n;
}

long long expert_parameters_per_layer(const MoeShape& s) {
  validate_moe_shape("expert_parameters_per_layer", s);
  return 3 * s.hidden_size * s.moe_intermediate_size;  // gate, up, down
}

long long expert_parameters_across_layers(const MoeShape& s) {
  return expert_parameters_per_layer(s) * moe_layer_count(s);
}

namespace {

// One layer's attention weights (MLA or GQA), biases included, norms not.
long long attention_per_layer(const MoeShape& s) {
  const long long d = s.hidden_size, h = s.num_attention_heads;
  if (s.is_mla()) {
    const long long qk_head = s.qk_nope_head_dim + s.qk_rope_head_dim;
    // queries: d -> d'_c -> h (d_h + d_h^R), or d -> h (d_h + d_h^R) without the latent
    const long long q = s.q_lora_rank > 0 ? d * s.q_lora_rank + s.q_lora_rank * h * qk_head : d * h * qk_head;
    const long long kv_down = d * (s.kv_lora_rank + s.qk_rope_head_dim);               // W^DKV and W^KR
    const long long kv_up = s.kv_lora_rank * h * (s.qk_nope_head_dim + s.v_head_dim);  // W^UK and W^UV
    return q + kv_down + kv_up + h * s.v_head_dim * d;                                  // + W^O
  }
  const long long q_width = h * s.head_dim, kv_width = s.num_key_value_heads * s.head_dim;
  const long long bias = s.qkv_bias ? q_width + 2 * kv_width : 0;
  return d * q_width + 2 * d * kv_width + q_width * d + bias;
}

// One layer's RMSNorm gains: before attention and before the FFN, plus MLA's latent norms or Qwen3's q/k norms.
long long norms_per_layer(const MoeShape& s) {
  long long n = 2 * s.hidden_size;
  if (s.is_mla()) n += s.q_lora_rank + s.kv_lora_rank;
  if (s.qk_norm) n += 2 * s.head_dim;
  return n;
}

long long router_per_layer(const MoeShape& s) {
  return s.hidden_size * s.num_experts + (s.router_bias ? s.num_experts : 0) +
         (s.shared_expert_gate ? s.hidden_size : 0);
}

// The count with `experts_used` routed experts per MoE layer (E for the total, k for the active).
MoeParameters count(const MoeShape& s, long long experts_used) {
  const long long d = s.hidden_size, L = s.num_hidden_layers, moe = moe_layer_count(s), dense = L - moe;
  MoeParameters p;
  p.embedding = s.vocab_size * d;
  p.attention = L * attention_per_layer(s);
  p.routers = moe * router_per_layer(s);
  p.routed_experts = moe * experts_used * 3 * d * s.moe_intermediate_size;
  p.shared_experts = moe * 3 * d * s.shared_intermediate_size;
  p.dense_ffn = dense * 3 * d * s.intermediate_size;
  p.norms = L * norms_per_layer(s) + d;
  p.output = s.tie_word_embeddings ? 0 : s.vocab_size * d;
  return p;
}

}  // namespace

MoeParameters moe_total_parameters(const MoeShape& s) {
  validate_moe_shape("moe_total_parameters", s);
  return count(s, s.num_experts);
}

MoeParameters moe_active_parameters(const MoeShape& s) {
  validate_moe_shape("moe_active_parameters", s);
  return count(s, s.num_experts_per_tok);
}

long long mtp_parameters(const MoeShape& s) {
  validate_moe_shape("mtp_parameters", s);
  const long long d = s.hidden_size;
  // M in R^{d x 2d}, the RMSNorms of the hidden state and of the next token's embedding, the block's
  // output norm, and one MoE Transformer block (attention, its norms, router, all experts).
  const long long block = attention_per_layer(s) + norms_per_layer(s) + router_per_layer(s) +
                          s.num_experts * 3 * d * s.moe_intermediate_size + 3 * d * s.shared_intermediate_size;
  return s.num_nextn_predict_layers * (2 * d * d + 3 * d + block);
}

double parameter_bytes(long long parameters, double bits) {
  require(parameters >= 0, "parameter_bytes", "parameters (", parameters, ") must not be negative");
  require(std::isfinite(bits) && bits > 0, "parameter_bytes", "bits_per_weight (", bits, ") must be positive");
  return static_cast<double>(parameters) * bits / 8.0;
}

double format_bits(const std::string& name) {
  if (name == "bf16" || name == "fp16") return 16;
  if (name == "fp8") return 8;
  if (name == "int4") return 4;
  for (const GgmlType t : quantized_types())
    if (type_name(t) == name) return bits_per_weight(t);
  std::string known = "bf16, fp16, fp8, int4";
  for (const GgmlType t : quantized_types()) known += ", " + type_name(t);
  fail("format_bits", "format (\"", name, "\") is not known; known: ", known);
}

long long expert_capacity(long long tokens, long long num_experts, double capacity_factor) {
  require_positive("expert_capacity", "tokens", tokens);
  require_positive("expert_capacity", "num_experts", num_experts);
  require(std::isfinite(capacity_factor) && capacity_factor > 0, "expert_capacity", "capacity_factor (",
          capacity_factor, ") must be positive");
  // The quotient in double: 4096 / 8 x 1.25 = 640 exactly; a tiny excess over an integer would round up.
  return static_cast<long long>(
      std::ceil(static_cast<double>(tokens) / static_cast<double>(num_experts) * capacity_factor - 1e-9));
}

// ---------------------------------------------------------------------------- config.json

namespace {

using Json = nlohmann::json;
constexpr const char* kRead = "read_moe_config";

struct Fields {
  const Json& json;
  const std::string& file;

  const Json* find(const char* key) const {
    const auto it = json.find(key);
    return it == json.end() || it->is_null() ? nullptr : &*it;
  }
  std::optional<long long> integer(const char* key) const {
    const Json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) fail(kRead, file, ": ", key, " must be a whole number, got ", v->dump());
    return v->get<long long>();
  }
  // The first of `keys` present; an error naming all of them when none is.
  long long required(std::initializer_list<const char*> keys) const {
    std::string names;
    for (const char* key : keys) {
      if (const auto v = integer(key)) return *v;
      names += (names.empty() ? "" : " or ") + std::string(key);
    }
    fail(kRead, file, ": ", names, " is missing");
  }
  bool boolean(const char* key, bool fallback) const {
    const Json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(kRead, file, ": ", key, " must be true or false, got ", v->dump());
    return v->get<bool>();
  }
  std::string text(const char* key) const {
    const Json* v = find(key);
    if (!v) return "";
    if (!v->is_string()) fail(kRead, file, ": ", key, " must be a string, got ", v->dump());
    return v->get<std::string>();
  }
};

}  // namespace

MoeShape read_moe_config(const std::string& path) {
  std::ifstream in(path);
  require(in.good(), kRead, path, ": cannot open the file");
  std::stringstream content;
  content << in.rdbuf();
  Json root;
  try {
    root = Json::parse(content.str());
  } catch (const Json::parse_error& e) {
    fail(kRead, path, ": not valid JSON (", e.what(), ")");
  }
  require(root.is_object(), kRead, path, ": the top level must be a JSON object, got ", root.type_name());
  // Llama 4's file nests the decoder in text_config (and ties nothing at the top level).
  const auto text_config = root.find("text_config");
  const bool nested = text_config != root.end() && text_config->is_object();
  const Fields f{nested ? *text_config : root, path};
  const std::string type = f.text("model_type");
  const bool llama4 = type == "llama4_text" || f.find("interleave_moe_layer_step") != nullptr;

  MoeShape s;
  s.name = path, s.source = path;
  s.hidden_size = f.required({"hidden_size"});
  s.num_hidden_layers = f.required({"num_hidden_layers"});
  s.num_attention_heads = f.required({"num_attention_heads"});
  s.num_key_value_heads = f.integer("num_key_value_heads").value_or(s.num_attention_heads);
  s.vocab_size = f.required({"vocab_size"});
  s.tie_word_embeddings = f.boolean("tie_word_embeddings", nested ? Fields{root, path}.boolean("tie_word_embeddings", false) : false);
  s.num_experts = f.required({"num_local_experts", "n_routed_experts", "num_experts"});
  s.num_experts_per_tok = f.required({"num_experts_per_tok"});
  s.kv_lora_rank = f.integer("kv_lora_rank").value_or(0);
  s.q_lora_rank = f.integer("q_lora_rank").value_or(0);
  s.qk_nope_head_dim = f.integer("qk_nope_head_dim").value_or(0);
  s.qk_rope_head_dim = f.integer("qk_rope_head_dim").value_or(0);
  s.v_head_dim = f.integer("v_head_dim").value_or(0);
  if (const auto head_dim = f.integer("head_dim")) {
    s.head_dim = *head_dim;
  } else if (!s.is_mla()) {
    require(s.num_attention_heads > 0 && s.hidden_size % s.num_attention_heads == 0, kRead, path,
            ": hidden_size (", s.hidden_size, ") must be a multiple of num_attention_heads (", s.num_attention_heads,
            ") when head_dim is not given");
    s.head_dim = s.hidden_size / s.num_attention_heads;
  }
  if (f.integer("moe_intermediate_size")) {
    s.moe_intermediate_size = *f.integer("moe_intermediate_size");
    s.intermediate_size = f.integer("intermediate_size").value_or(0);
  } else if (llama4) {
    s.moe_intermediate_size = f.required({"intermediate_size"});
    s.intermediate_size = f.integer("intermediate_size_mlp").value_or(0);
    s.shared_intermediate_size = s.moe_intermediate_size;  // Llama4TextMoe: one shared expert of the same width
  } else {
    s.moe_intermediate_size = f.required({"moe_intermediate_size", "intermediate_size"});  // Mixtral: the expert's
  }
  if (const auto shared = f.integer("n_shared_experts")) s.shared_intermediate_size = *shared * s.moe_intermediate_size;
  if (const auto shared = f.integer("shared_expert_intermediate_size")) s.shared_intermediate_size = *shared;
  s.first_k_dense_replace = f.integer("first_k_dense_replace").value_or(0);
  s.moe_layer_step = f.integer("decoder_sparse_step").value_or(f.integer("interleave_moe_layer_step").value_or(1));
  if (const Json* only = f.find("mlp_only_layers"))
    require(only->is_array() && only->empty(), kRead, path,
            ": mlp_only_layers (", only->dump(), ") is not modelled: only an empty list is accepted");
  s.num_nextn_predict_layers = f.integer("num_nextn_predict_layers").value_or(0);
  s.qkv_bias = type == "qwen2_moe";
  s.shared_expert_gate = type == "qwen2_moe" && s.shared_intermediate_size > 0;
  s.qk_norm = type == "qwen3_moe";
  s.router_bias = type == "deepseek_v3";
  const std::string where = std::string(kRead) + ": " + path;
  validate_moe_shape(where.c_str(), s);
  return s;
}

}  // namespace tvlab::analysis
