#include "tvlab/analysis/model_size.hpp"

#include <algorithm>
#include <cctype>
#include <utility>

#include "tvlab/core/error.hpp"
#include "tvlab/core/ggml_blocks.hpp"

namespace tvlab::analysis {

const std::vector<DecoderShape>& decoder_shapes() {
  static const std::vector<DecoderShape> all = {
      {"llama-2-7b", 4096, 32, 32, 32, 128, 11008, 32000, false, "huggingface.co/meta-llama/Llama-2-7b-hf config.json"},
      {"llama-2-70b", 8192, 80, 64, 8, 128, 28672, 32000, false, "huggingface.co/meta-llama/Llama-2-70b-hf config.json"},
      {"llama-3-8b", 4096, 32, 32, 8, 128, 14336, 128256, false, "huggingface.co/meta-llama/Meta-Llama-3-8B config.json"},
      {"llama-3-70b", 8192, 80, 64, 8, 128, 28672, 128256, false, "huggingface.co/meta-llama/Meta-Llama-3-70B config.json"},
      {"mistral-7b", 4096, 32, 32, 8, 128, 14336, 32000, false, "huggingface.co/mistralai/Mistral-7B-v0.1 config.json"},
  };
  return all;
}

const DecoderShape& decoder_shape(const std::string& name) {
  std::string known;
  for (const DecoderShape& s : decoder_shapes()) {
    if (s.name == name) return s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  fail("decoder_shape", "no model called \"", name, "\": the known ones are ", known);
}

namespace {

void check_shape(const char* fn, const DecoderShape& s) {
  require(s.hidden_size > 0 && s.num_hidden_layers > 0 && s.num_attention_heads > 0 && s.num_key_value_heads > 0 &&
              s.head_dim > 0 && s.intermediate_size > 0 && s.vocab_size > 0,
          fn, s.name, ": every size must be positive");
  require(s.num_attention_heads % s.num_key_value_heads == 0, fn, s.name, ": num_attention_heads (",
          s.num_attention_heads, ") must be a multiple of num_key_value_heads (", s.num_key_value_heads, ")");
}

}  // namespace

DecoderParameters decoder_parameters(const DecoderShape& s) {
  check_shape("decoder_parameters", s);
  const long long d = s.hidden_size, L = s.num_hidden_layers, q_width = s.num_attention_heads * s.head_dim,
                  kv_width = s.num_key_value_heads * s.head_dim;
  DecoderParameters p;
  p.embedding = s.vocab_size * d;
  p.qkv = L * (d * q_width + 2 * d * kv_width);
  p.output = L * q_width * d;
  p.ffn = L * 3 * d * s.intermediate_size;
  p.norms = L * 2 * d + d;
  p.lm_head = s.tie_word_embeddings ? 0 : s.vocab_size * d;
  return p;
}

double model_bytes(const DecoderParameters& p, const BitAllocation& b) {
  require(b.embedding > 0 && b.qkv > 0 && b.output > 0 && b.ffn > 0 && b.norms > 0 && b.lm_head > 0, "model_bytes",
          "every component needs a positive number of bits");
  return (static_cast<double>(p.embedding) * b.embedding + static_cast<double>(p.qkv) * b.qkv +
          static_cast<double>(p.output) * b.output + static_cast<double>(p.ffn) * b.ffn +
          static_cast<double>(p.norms) * b.norms + static_cast<double>(p.lm_head) * b.lm_head) /
         8.0;
}

namespace {

constexpr KQuantMix all_mixes[] = {KQuantMix::q4_0, KQuantMix::q8_0, KQuantMix::q4_K_S,
                                   KQuantMix::q4_K_M, KQuantMix::q5_K_M, KQuantMix::q6_K};

// llama_ftype_get_default_type: the type of every tensor no rule singles out
std::string base_type(KQuantMix mix) {
  switch (mix) {
    case KQuantMix::q4_0: return "Q4_0";
    case KQuantMix::q8_0: return "Q8_0";
    case KQuantMix::q4_K_S:
    case KQuantMix::q4_K_M: return "Q4_K";
    case KQuantMix::q5_K_M: return "Q5_K";
    case KQuantMix::q6_K: return "Q6_K";
  }
  fail("llama_cpp_tensor_types", "mix (", static_cast<int>(mix), ") is not a known mix");
}

// (weights, bytes) of one block. Q5_K is not among GgmlType's formats (the chapter does not quantize
// to it), so its block is spelled out here from ggml-common.h's block_q5_K: fp16 d, fp16 dmin, 12
// bytes of 6-bit scales and mins, 32 bytes of fifth bits, 128 bytes of nibbles for 256 weights.
std::pair<long long, long long> block_of(const std::string& type) {
  if (type == "Q5_K") return {256, 2 + 2 + 12 + 32 + 128};
  const GgmlType t = type_from_name("llama_cpp_tensor_types", type);
  return {static_cast<long long>(block_size(t)), static_cast<long long>(block_bytes(t))};
}

// tensor_type_fallback: a row length the super-block of 256 does not divide takes a 32-weight type
// of at least as many bits, or F16 when 32 does not divide it either
std::string fall_back(const std::string& name, long long cols, const std::string& type) {
  if (cols % block_of(type).first == 0) return type;
  std::string smaller;
  if (type == "Q4_K") smaller = "Q5_0";
  else if (type == "Q5_K") smaller = "Q5_1";
  else if (type == "Q6_K") smaller = "Q8_0";
  else fail("llama_cpp_tensor_types", name, ": a row of ", cols, " weights is not a multiple of ", type,
            "'s block (", block_of(type).first, ") and llama.cpp has no fallback for ", type);
  return cols % block_of(smaller).first == 0 ? smaller : "F16";
}

TensorType tensor(const std::string& name, long long rows, long long cols, const std::string& type) {
  const auto [block, bytes] = block_of(type);
  return {name, rows, cols, type, block, bytes};
}

}  // namespace

std::string mix_name(KQuantMix mix) {
  switch (mix) {
    case KQuantMix::q4_0: return "Q4_0";
    case KQuantMix::q8_0: return "Q8_0";
    case KQuantMix::q4_K_S: return "Q4_K_S";
    case KQuantMix::q4_K_M: return "Q4_K_M";
    case KQuantMix::q5_K_M: return "Q5_K_M";
    case KQuantMix::q6_K: return "Q6_K";
  }
  return "mix " + std::to_string(static_cast<int>(mix));
}

KQuantMix kquant_mix(const std::string& name) {
  std::string upper = name;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  std::string known;
  for (KQuantMix m : all_mixes) {
    std::string m_upper = mix_name(m);
    std::transform(m_upper.begin(), m_upper.end(), m_upper.begin(), [](unsigned char c) { return std::toupper(c); });
    if (m_upper == upper) return m;
    known += (known.empty() ? "" : ", ") + mix_name(m);
  }
  fail("kquant_mix", "mix \"", name, "\" is not one of ", known);
}

bool use_more_bits(long long i, long long n) {
  require_positive("use_more_bits", "n_layers", n);
  require(i >= 0 && i < n, "use_more_bits", "i_layer (", i, ") must lie in [0, n_layers) = [0, ", n, ")");
  // the first eighth, the last eighth, and every third layer in between (integer division, as in C++)
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

std::vector<TensorType> llama_cpp_tensor_types(const DecoderShape& s, KQuantMix mix) {
  check_shape("llama_cpp_tensor_types", s);
  const std::string base = base_type(mix);
  const long long d = s.hidden_size, L = s.num_hidden_layers, q_width = s.num_attention_heads * s.head_dim,
                  kv_width = s.num_key_value_heads * s.head_dim, F = s.intermediate_size;
  const bool k_m = mix == KQuantMix::q4_K_M || mix == KQuantMix::q5_K_M;
  // LLM_TYPE_70B: the LLaMA loader's name for 80 layers with grouped kv heads (LLaMA 2 and 3 70B)
  const bool type_70b = L == 80 && s.num_attention_heads != s.num_key_value_heads;

  // output.weight (or the tied embedding): Q8_0 when its row does not fit the base block, else Q6_K
  // unless the mix is Q8_0
  std::string output = d % block_of(base).first != 0 ? "Q8_0" : (base == "Q8_0" ? "Q8_0" : "Q6_K");
  output = fall_back("output.weight", d, output);

  std::vector<TensorType> all;
  const std::string embd = s.tie_word_embeddings ? output : fall_back("token_embd.weight", d, base);
  all.push_back(tensor("token_embd.weight", s.vocab_size, d, embd));
  for (long long i = 0; i < L; ++i) {
    const std::string blk = "blk." + std::to_string(i) + ".";
    std::string v = base, down = base;
    if (k_m && use_more_bits(i, L)) v = down = "Q6_K";
    if (mix == KQuantMix::q4_K_S && i < 4) v = "Q5_K";
    if (mix == KQuantMix::q4_K_S && i < L / 8) down = "Q5_K";
    if (type_70b && v == "Q4_K") v = "Q5_K";  // attn_v is 8 times smaller than attn_q: a cheap bit
    // rows = output features, cols = input features (ggml's ne[0] is what the blocks cut)
    all.push_back(tensor(blk + "attn_norm.weight", 1, d, "F32"));
    all.push_back(tensor(blk + "attn_q.weight", q_width, d, fall_back(blk + "attn_q.weight", d, base)));
    all.push_back(tensor(blk + "attn_k.weight", kv_width, d, fall_back(blk + "attn_k.weight", d, base)));
    all.push_back(tensor(blk + "attn_v.weight", kv_width, d, fall_back(blk + "attn_v.weight", d, v)));
    all.push_back(tensor(blk + "attn_output.weight", d, q_width, fall_back(blk + "attn_output.weight", q_width, base)));
    all.push_back(tensor(blk + "ffn_norm.weight", 1, d, "F32"));
    all.push_back(tensor(blk + "ffn_gate.weight", F, d, fall_back(blk + "ffn_gate.weight", d, base)));
    all.push_back(tensor(blk + "ffn_up.weight", F, d, fall_back(blk + "ffn_up.weight", d, base)));
    all.push_back(tensor(blk + "ffn_down.weight", d, F, fall_back(blk + "ffn_down.weight", F, down)));
  }
  all.push_back(tensor("output_norm.weight", 1, d, "F32"));
  if (!s.tie_word_embeddings) all.push_back(tensor("output.weight", s.vocab_size, d, output));
  return all;
}

MixSize mix_size(const DecoderShape& shape, KQuantMix mix) {
  MixSize total;
  for (const TensorType& t : llama_cpp_tensor_types(shape, mix)) {
    total.bytes += t.bytes();
    total.weights += t.weights();
  }
  return total;
}

}  // namespace tvlab::analysis
