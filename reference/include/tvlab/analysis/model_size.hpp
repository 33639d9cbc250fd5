#pragma once
/// @file
/// Chapter 08, how big a model is at a given precision: the parameters of a dense decoder (LLaMA,
/// Mistral) counted by component from its config, and the bytes when each component gets its own
/// number of bits (mixed precision, 000 L257: "QKV in INT8, softmax in FP16, FFN in INT4,
/// LayerNorm in FP16").
///
/// Per layer, with hidden size d, h query heads and g key-value heads of width \f$ d_h \f$ and FFN width F
/// (a gated FFN: gate, up and down projections, no biases):
/// \f[ \underbrace{d\,h d_h}_{Q} + \underbrace{2\,d\,g d_h}_{K, V} + \underbrace{h d_h\, d}_{O} + \underbrace{3\,d F}_{\text{FFN}} + \underbrace{2d}_{\text{RMSNorms}}, \f]
/// plus the token embedding \f$ V d \f$, the final norm d, and the output layer \f$ V d \f$ unless it is tied
/// to the embedding.

#include <string>
#include <vector>

namespace tvlab::analysis {

/// @ingroup ch08
/// A dense decoder's shape, in Hugging Face's config names.
struct DecoderShape {
  std::string name;
  long long hidden_size = 0, num_hidden_layers = 0, num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0;
  long long intermediate_size = 0, vocab_size = 0;
  bool tie_word_embeddings = false;
  std::string source;  ///< where the numbers come from
};

/// @ingroup ch08
/// llama-2-7b, llama-2-70b, llama-3-8b, llama-3-70b, mistral-7b (their config.json files).
const std::vector<DecoderShape>& decoder_shapes();

/// @ingroup ch08
/// The shape called `name`; an error listing the names otherwise.
const DecoderShape& decoder_shape(const std::string& name);

/// @ingroup ch08
/// A decoder's parameters by component.
struct DecoderParameters {
  long long embedding = 0;  ///< \f$ V d \f$
  long long qkv = 0;        ///< every layer's Q, K and V projections
  long long output = 0;     ///< every layer's attention output projection O
  long long ffn = 0;        ///< every layer's gate, up and down projections
  long long norms = 0;      ///< every RMSNorm gain, the final one included
  long long lm_head = 0;    ///< \f$ V d \f$, or 0 when tied to the embedding
  long long total() const { return embedding + qkv + output + ffn + norms + lm_head; }
};

/// @ingroup ch08
/// The counts above. Errors: a size that is not positive, heads not a multiple of the kv heads.
DecoderParameters decoder_parameters(const DecoderShape& shape);

/// @ingroup ch08
/// Bits per weight of each component (16 everywhere: FP16 or BF16).
struct BitAllocation {
  double embedding = 16, qkv = 16, output = 16, ffn = 16, norms = 16, lm_head = 16;
};

/// @ingroup ch08
/// \f$ \sum_c N_c b_c / 8 \f$ bytes. Errors: a number of bits that is not positive.
double model_bytes(const DecoderParameters& parameters, const BitAllocation& bits);

}  // namespace tvlab::analysis
