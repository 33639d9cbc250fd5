// Reads the RoPE settings of a Hugging Face config.json. The only source that includes the JSON
// library in the reference library (it is slow to compile).

#include "tvlab/core/rope_hf_config.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>

#include "tvlab/core/error.hpp"

namespace tvlab {
namespace {

using Json = nlohmann::json;
constexpr const char* kFunction = "read_hf_rope_config";

// One JSON object of the file, with the path its fields are named by ("" or "rope_scaling.").
struct Block {
  const Json& json;
  std::string prefix;
  const std::string& file;

  // The field, or nullptr when it is absent or null (transformers treats both as "not given").
  const Json* find(const char* key) const {
    const auto it = json.find(key);
    return it == json.end() || it->is_null() ? nullptr : &*it;
  }
  [[noreturn]] void wrong(const char* key, const char* expected, const Json& value) const {
    fail(kFunction, file, ": ", prefix, key, " must be ", expected, ", got ", value.dump());
  }
  std::optional<double> number(const char* key) const {
    const Json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) wrong(key, "a number", *v);
    return v->get<double>();
  }
  std::optional<long long> integer(const char* key) const {
    const Json* v = find(key);
    if (!v) return std::nullopt;
    // 131072.0 is accepted as 131072; 0.5 is not a length.
    if (!v->is_number() || std::floor(v->get<double>()) != v->get<double>()) wrong(key, "a whole number", *v);
    return v->is_number_integer() ? v->get<long long>() : static_cast<long long>(v->get<double>());
  }
  std::optional<std::string> text(const char* key) const {
    const Json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) wrong(key, "a string", *v);
    return v->get<std::string>();
  }
  std::optional<bool> truth(const char* key) const {
    const Json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) wrong(key, "true or false", *v);
    return v->get<bool>();
  }
  std::optional<std::vector<double>> numbers(const char* key) const {
    const Json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_array()) wrong(key, "a list of numbers", *v);
    std::vector<double> out;
    for (const Json& e : *v) {
      if (!e.is_number()) wrong(key, "a list of numbers", *v);
      out.push_back(e.get<double>());
    }
    return out;
  }
  [[noreturn]] void missing(const char* key, const std::string& why) const {
    fail(kFunction, file, ": ", prefix, key, " is missing", why);
  }
};

Json parse_file(const std::string& path) {
  std::ifstream in(path);
  require(in.good(), kFunction, path, ": cannot open the file");
  std::stringstream text;
  text << in.rdbuf();
  Json root;
  try {
    root = Json::parse(text.str());
  } catch (const Json::parse_error& e) {
    // nlohmann's message: "[json.exception.parse_error.101] parse error at line 3, column 5: ...".
    fail(kFunction, path, ": not valid JSON (", e.what(), ")");
  }
  require(root.is_object(), kFunction, path, ": the top level must be a JSON object, got ", root.type_name());
  return root;
}

}  // namespace

HfRopeConfig read_hf_rope_config(const std::string& path) {
  const Json root = parse_file(path);
  const Block top{root, "", path};
  // The rope block: rope_parameters (transformers 5) or rope_scaling (older); absent or null: plain RoPE.
  static const Json kEmpty = Json::object();
  const char* block_name = top.find("rope_parameters") ? "rope_parameters" : "rope_scaling";
  const Json* block_json = top.find(block_name);
  if (block_json && !block_json->is_object()) top.wrong(block_name, "an object", *block_json);
  const Block rope{block_json ? *block_json : kEmpty, std::string(block_name) + ".", path};
  // Gemma-style blocks keyed by layer type ({"full_attention": {...}, "sliding_attention": {...}}).
  for (const auto& [key, value] : rope.json.items())
    require(!value.is_object(), kFunction, path, ": ", block_name, ".", key,
            " is a block of its own (parameters per layer type), which this reader does not support");

  HfRopeConfig out;
  RopeConfig& cfg = out.config;
  RopeScaling& sc = cfg.rope_scaling;
  cfg.rope_theta = rope.number("rope_theta").value_or(top.number("rope_theta").value_or(10000.0));
  const auto max_positions = top.integer("max_position_embeddings");
  if (!max_positions) top.missing("max_position_embeddings", " (the context length the frequencies are scaled for)");
  cfg.max_position_embeddings = *max_positions;
  if (const auto head_dim = top.integer("head_dim")) {
    cfg.head_dim = static_cast<int>(*head_dim);
  } else {
    const auto hidden = top.integer("hidden_size"), heads = top.integer("num_attention_heads");
    if (!hidden) top.missing("hidden_size", " (needed for head_dim = hidden_size / num_attention_heads)");
    if (!heads) top.missing("num_attention_heads", " (needed for head_dim = hidden_size / num_attention_heads)");
    require(*heads > 0 && *hidden > 0 && *hidden % *heads == 0, kFunction, path, ": hidden_size (", *hidden,
            ") must be a positive multiple of num_attention_heads (", *heads, ") when head_dim is not given");
    cfg.head_dim = static_cast<int>(*hidden / *heads);
  }
  cfg.partial_rotary_factor = rope.number("partial_rotary_factor").value_or(
      top.number("partial_rotary_factor").value_or(1.0));

  sc.rope_type = rope.text("rope_type").value_or(rope.text("type").value_or("default"));
  const bool measured_in_original = sc.rope_type == "llama3" || sc.rope_type == "yarn" || sc.rope_type == "longrope";
  // A top-level original_max_position_embeddings wins (Phi-3 keeps it there); for the types that
  // measure against it, the default is max_position_embeddings.
  const auto original = top.integer("original_max_position_embeddings");
  sc.original_max_position_embeddings = original.value_or(
      rope.integer("original_max_position_embeddings").value_or(measured_in_original ? cfg.max_position_embeddings : 0));
  const auto factor = rope.number("factor");
  out.factor_given = factor.has_value() || !(sc.rope_type == "yarn" || sc.rope_type == "longrope");
  if (factor) {
    sc.factor = *factor;
  } else if (sc.rope_type == "yarn" || sc.rope_type == "longrope") {
    require(sc.original_max_position_embeddings > 0, kFunction, path, ": ", block_name,
            ".original_max_position_embeddings (", sc.original_max_position_embeddings,
            ") must be positive: without factor it gives factor = max_position_embeddings / it");
    sc.factor = static_cast<double>(cfg.max_position_embeddings) /
                static_cast<double>(sc.original_max_position_embeddings);
  } else if (sc.rope_type != "default") {
    rope.missing("factor", " (required for rope_type " + sc.rope_type + ")");
  }
  // "beta_fast or 32" in transformers: 0 also means the default.
  if (const auto v = rope.number("beta_fast"); v && *v != 0.0) sc.beta_fast = *v;
  if (const auto v = rope.number("beta_slow"); v && *v != 0.0) sc.beta_slow = *v;
  sc.attention_factor = rope.number("attention_factor");
  sc.mscale = rope.number("mscale");
  sc.mscale_all_dim = rope.number("mscale_all_dim");
  sc.truncate = rope.truth("truncate").value_or(true);
  if (sc.rope_type == "llama3") {
    const auto low = rope.number("low_freq_factor"), high = rope.number("high_freq_factor");
    if (!low) rope.missing("low_freq_factor", " (required for rope_type llama3)");
    if (!high) rope.missing("high_freq_factor", " (required for rope_type llama3)");
    sc.low_freq_factor = *low;
    sc.high_freq_factor = *high;
  }
  if (sc.rope_type == "longrope") {
    const auto short_factor = rope.numbers("short_factor"), long_factor = rope.numbers("long_factor");
    if (!short_factor) rope.missing("short_factor", " (required for rope_type longrope)");
    if (!long_factor) rope.missing("long_factor", " (required for rope_type longrope)");
    sc.short_factor = *short_factor;
    sc.long_factor = *long_factor;
  }
  // The field checks of every RopeConfig, their messages prefixed with the file.
  const std::string where = std::string(kFunction) + ": " + path;
  validate_rope_config(where.c_str(), cfg);
  return out;
}

}  // namespace tvlab
