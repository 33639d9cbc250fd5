// Model configs: the built-in published shapes and the reader of a Hugging Face config.json.

#include "tvlab/core/model_config.hpp"

#include <nlohmann/json.hpp>

#include <climits>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>

#include "tvlab/core/error.hpp"

namespace tvlab {

void validate_model_config(std::string_view function, const ModelConfig& c) {
  require_positive(function, "num_hidden_layers", c.num_hidden_layers);
  require_positive(function, "hidden_size", c.hidden_size);
  require_positive(function, "num_attention_heads", c.num_attention_heads);
  require_positive(function, "num_key_value_heads", c.num_key_value_heads);
  require_positive(function, "head_dim", c.head_dim);
  // Each key-value head serves h / g query heads, so g must divide h.
  require(c.num_attention_heads % c.num_key_value_heads == 0, function, "num_attention_heads (",
          c.num_attention_heads, ") must be a multiple of num_key_value_heads (", c.num_key_value_heads, ")");
  require(c.kv_lora_rank >= 0, function, "kv_lora_rank (", c.kv_lora_rank, ") must not be negative");
  require(c.q_lora_rank >= 0, function, "q_lora_rank (", c.q_lora_rank, ") must not be negative");
  require(c.qk_nope_head_dim >= 0, function, "qk_nope_head_dim (", c.qk_nope_head_dim, ") must not be negative");
  require(c.v_head_dim >= 0, function, "v_head_dim (", c.v_head_dim, ") must not be negative");
  require(c.qk_rope_head_dim >= 0, function, "qk_rope_head_dim (", c.qk_rope_head_dim, ") must not be negative");
  // MLA caches the latent and the decoupled RoPE key: without the key, positions would be lost.
  if (c.is_mla()) require_positive(function, "qk_rope_head_dim (needed by MLA)", c.qk_rope_head_dim);
}

namespace {

using Json = nlohmann::json;
constexpr const char* kRead = "read_model_config";

// The fields of the top-level object, each problem naming the file and the field.
struct Fields {
  const Json& json;
  const std::string& file;

  const Json* find(const char* key) const {
    const auto it = json.find(key);
    return it == json.end() || it->is_null() ? nullptr : &*it;  // null counts as absent
  }
  std::optional<long long> integer(const char* key) const {
    const Json* v = find(key);
    if (!v) return std::nullopt;
    // 4096.0 is accepted as 4096; 0.5 heads is not a size.
    if (!v->is_number() || std::floor(v->get<double>()) != v->get<double>())
      fail(kRead, file, ": ", key, " must be a whole number, got ", v->dump());
    // Beyond long long's range neither conversion is defined (nor meaningful for a size): refuse.
    const bool too_large = v->is_number_unsigned()
                               ? v->get<unsigned long long>() > static_cast<unsigned long long>(LLONG_MAX)
                               : !v->is_number_integer() && std::fabs(v->get<double>()) >= 9223372036854775808.0;
    if (too_large) fail(kRead, file, ": ", key, " (", v->dump(), ") is beyond the range of a 64-bit size");
    return v->is_number_integer() ? v->get<long long>() : static_cast<long long>(v->get<double>());
  }
  long long required(const char* key) const {
    const auto v = integer(key);
    if (!v) fail(kRead, file, ": ", key, " is missing");
    return *v;
  }
  std::optional<std::string> text(const char* key) const {
    const Json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) fail(kRead, file, ": ", key, " must be a string, got ", v->dump());
    return v->get<std::string>();
  }
};

}  // namespace

ModelConfig read_model_config(const std::string& path) {
  std::ifstream in(path);
  require(in.good(), kRead, path, ": cannot open the file");
  std::stringstream text;
  text << in.rdbuf();
  Json root;
  try {
    root = Json::parse(text.str());
  } catch (const Json::parse_error& e) {
    fail(kRead, path, ": not valid JSON (", e.what(), ")");
  }
  require(root.is_object(), kRead, path, ": the top level must be a JSON object, got ", root.type_name());
  const Fields f{root, path};

  ModelConfig c;
  c.name = path;
  c.source = path;
  c.num_hidden_layers = f.required("num_hidden_layers");
  c.hidden_size = f.required("hidden_size");
  c.num_attention_heads = f.required("num_attention_heads");
  // transformers: num_key_value_heads defaults to num_attention_heads (MHA).
  c.num_key_value_heads = f.integer("num_key_value_heads").value_or(c.num_attention_heads);
  c.kv_lora_rank = f.integer("kv_lora_rank").value_or(0);
  c.q_lora_rank = f.integer("q_lora_rank").value_or(0);
  c.qk_rope_head_dim = f.integer("qk_rope_head_dim").value_or(0);
  c.qk_nope_head_dim = f.integer("qk_nope_head_dim").value_or(0);
  c.v_head_dim = f.integer("v_head_dim").value_or(0);
  if (const auto head_dim = f.integer("head_dim")) {
    c.head_dim = *head_dim;
  } else if (c.kv_lora_rank > 0 && c.qk_nope_head_dim > 0) {
    c.head_dim = c.qk_nope_head_dim;  // MLA: the paper's d_h (see the header)
  } else {
    require(c.num_attention_heads > 0 && c.hidden_size % c.num_attention_heads == 0, kRead, path,
            ": hidden_size (", c.hidden_size, ") must be a multiple of num_attention_heads (",
            c.num_attention_heads, ") when head_dim is not given");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  // transformers 4.x writes torch_dtype, 5.x writes dtype.
  c.torch_dtype = f.text("torch_dtype").value_or(f.text("dtype").value_or(""));
  const std::string where = std::string(kRead) + ": " + path;
  validate_model_config(where, c);
  return c;
}

namespace {

ModelConfig dense(const char* name, long long layers, long long hidden, long long heads, long long kv_heads,
                  long long head_dim, const char* source) {
  ModelConfig c;
  c.name = name;
  c.num_hidden_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = head_dim;
  c.torch_dtype = "bfloat16";
  c.source = source;
  return c;
}

// MLA: every head has its own (up-projected) key and value, so num_key_value_heads = heads, as the
// DeepSeek config.json files say; head_dim is the paper's d_h = qk_nope_head_dim.
ModelConfig mla(const char* name, long long layers, long long hidden, long long heads, long long kv_lora_rank,
                long long q_lora_rank, long long rope, long long nope, long long v, const char* source) {
  ModelConfig c = dense(name, layers, hidden, heads, heads, nope, source);
  c.kv_lora_rank = kv_lora_rank;
  c.q_lora_rank = q_lora_rank;
  c.qk_rope_head_dim = rope;
  c.qk_nope_head_dim = nope;
  c.v_head_dim = v;
  return c;
}

std::vector<ModelConfig> build_named_configs() {
  std::vector<ModelConfig> all = {
      // huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json: 32 layers, hidden 4096, 32 heads,
      // num_key_value_heads 32 (MHA); Touvron et al. 2023, "Llama 2", Table 1 (GQA only for 34B/70B).
      dense("llama-2-7b", 32, 4096, 32, 32, 128, "huggingface.co/meta-llama/Llama-2-7b-hf config.json"),
      // huggingface.co/meta-llama/Llama-2-70b-hf/blob/main/config.json: 80 layers, hidden 8192, 64 heads,
      // num_key_value_heads 8 (k_proj 8192 -> 1024 = 8 x 128).
      dense("llama-2-70b", 80, 8192, 64, 8, 128, "huggingface.co/meta-llama/Llama-2-70b-hf config.json"),
      // huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json: 32 layers, 4096, 32 heads, 8 kv heads.
      dense("llama-3-8b", 32, 4096, 32, 8, 128, "huggingface.co/meta-llama/Meta-Llama-3-8B config.json"),
      // huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json: 80 layers, 8192, 64 heads, 8 kv heads.
      dense("llama-3-70b", 80, 8192, 64, 8, 128, "huggingface.co/meta-llama/Meta-Llama-3-70B config.json"),
      // huggingface.co/meta-llama/Llama-3.1-405B/blob/main/config.json: 126 layers, 16384, 128 heads,
      // 8 kv heads; Dubey et al. 2024, "The Llama 3 Herd of Models", Table 3.
      dense("llama-3.1-405b", 126, 16384, 128, 8, 128, "huggingface.co/meta-llama/Llama-3.1-405B config.json"),
      // huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json: 32 layers, 4096, 32 heads, 8 kv
      // heads, head_dim 128; Jiang et al. 2023, "Mistral 7B", Table 1.
      dense("mistral-7b", 32, 4096, 32, 8, 128, "huggingface.co/mistralai/Mistral-7B-v0.1 config.json"),
      // huggingface.co/deepseek-ai/DeepSeek-V2/blob/main/config.json: 60 layers, hidden 5120, 128 heads,
      // kv_lora_rank 512, q_lora_rank 1536, qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128;
      // DeepSeek-AI 2024, "DeepSeek-V2", arXiv:2405.04434, section 3.1.1 (d_c = 4 d_h, d_h^R = d_h / 2).
      mla("deepseek-v2", 60, 5120, 128, 512, 1536, 64, 128, 128,
          "huggingface.co/deepseek-ai/DeepSeek-V2 config.json; arXiv:2405.04434"),
      // huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json: 27 layers, hidden 2048, 16 heads,
      // kv_lora_rank 512, q_lora_rank null (queries not compressed), rope 64, nope 128, v 128.
      mla("deepseek-v2-lite", 27, 2048, 16, 512, 0, 64, 128, 128,
          "huggingface.co/deepseek-ai/DeepSeek-V2-Lite config.json"),
      // huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json: 61 layers, hidden 7168, 128 heads,
      // kv_lora_rank 512, q_lora_rank 1536, rope 64, nope 128, v 128; DeepSeek-AI 2024, arXiv:2412.19437.
      mla("deepseek-v3", 61, 7168, 128, 512, 1536, 64, 128, 128,
          "huggingface.co/deepseek-ai/DeepSeek-V3 config.json; arXiv:2412.19437"),
  };
  for (const auto& c : all) validate_model_config("named_model_configs", c);
  return all;
}

}  // namespace

const std::vector<ModelConfig>& named_model_configs() {
  static const std::vector<ModelConfig> all = build_named_configs();
  return all;
}

const ModelConfig& named_model_config(std::string_view name) {
  std::string known;
  for (const auto& c : named_model_configs()) {
    if (c.name == name) return c;
    known += (known.empty() ? "" : ", ") + c.name;
  }
  fail("named_model_config", "name (\"", name, "\") is not a built-in config; known: ", known);
}

}  // namespace tvlab
