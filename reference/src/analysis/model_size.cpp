#include "tvlab/analysis/model_size.hpp"

#include "tvlab/core/error.hpp"

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

DecoderParameters decoder_parameters(const DecoderShape& s) {
  const char* fn = "decoder_parameters";
  require(s.hidden_size > 0 && s.num_hidden_layers > 0 && s.num_attention_heads > 0 && s.num_key_value_heads > 0 &&
              s.head_dim > 0 && s.intermediate_size > 0 && s.vocab_size > 0,
          fn, s.name, ": every size must be positive");
  require(s.num_attention_heads % s.num_key_value_heads == 0, fn, s.name, ": num_attention_heads (",
          s.num_attention_heads, ") must be a multiple of num_key_value_heads (", s.num_key_value_heads, ")");
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

}  // namespace tvlab::analysis
