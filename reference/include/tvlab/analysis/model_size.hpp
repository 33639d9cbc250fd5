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
///
/// **llama.cpp's quantization mixes.** A GGUF file "Q4_K_M" is not 4.5 bits everywhere: llama.cpp's
/// `llama_tensor_get_type_impl` (src/llama-quant.cpp, ggml-org/llama.cpp at commit 007dbbf3; in older
/// versions `llama_tensor_get_type` in llama.cpp) picks each tensor's type from the file
/// type, its role and its layer. For a dense LLaMA-architecture decoder (LLaMA 2 and 3, Mistral)
/// and the mixes here, the rules that apply are, in the source's words:
/// - the base type (`llama_ftype_get_default_type`): Q4_K for Q4_K_S and Q4_K_M, Q5_K for Q5_K_M,
///   Q6_K for Q6_K, Q4_0 for Q4_0, Q8_0 for Q8_0;
/// - only tensors of two or more dimensions whose names end in "weight" and not "_norm.weight" are
///   quantized (`tensor_allows_quantization`): the RMSNorm gains stay F32, as the converter wrote them;
/// - `output.weight`, and `token_embd.weight` when the embeddings are tied (no `output.weight` in the
///   file): `if (arch == LLM_ARCH_FALCON || nx % qk_k != 0) new_type = GGML_TYPE_Q8_0;` ...
///   `else if (new_type != GGML_TYPE_Q8_0) new_type = GGML_TYPE_Q6_K;` (Q6_K in every mix here but
///   Q8_0, plain Q4_0 included); an untied `token_embd.weight` keeps the base type;
/// - `attn_v.weight`: `(ftype == LLAMA_FTYPE_MOSTLY_Q4_K_M || ftype == LLAMA_FTYPE_MOSTLY_Q5_K_M) &&
///   use_more_bits(qs.i_attention_wv, qs.n_attention_wv)` gives Q6_K; `ftype == LLAMA_FTYPE_MOSTLY_Q4_K_S
///   && qs.i_attention_wv < 4` gives Q5_K; then `if (qs.model.type == LLM_TYPE_70B)` a Q4_K becomes
///   Q5_K (the LLaMA loader calls a model of 80 layers with fewer kv heads than heads 70B: its attn_v
///   is 8 times smaller than attn_q, so the extra bit costs little);
/// - `ffn_down`: Q4_K_M and Q5_K_M: `if (use_more_bits(i_layer, n_layer)) new_type = GGML_TYPE_Q6_K;`
///   Q4_K_S: `i_layer < n_layer/8` gives Q5_K;
/// - attn_q, attn_k, attn_output, ffn_gate, ffn_up keep the base type (their rules concern other
///   mixes, Falcon, or models with 8 experts);
/// - a row length (ggml's ne[0], the columns) that the block does not divide falls back
///   (`tensor_type_fallback`): Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0, then F16 if 32 does not
///   divide it either; no fallback exists for Q4_0 or Q8_0 (llama.cpp refuses).
///
/// with
/// \f[ \mathrm{use\_more\_bits}(i, n) = i < \lfloor n/8 \rfloor \;\lor\; i \ge \lfloor 7n/8 \rfloor \;\lor\; (i - \lfloor n/8 \rfloor) \bmod 3 = 2, \f]
/// the first and last eighth of the layers and every third layer between them. llama.cpp counts
/// `i_attention_wv` and `i_ffn_down` in the order of its tensor map, sorted by layer number, so i is
/// the layer. Not modelled: an importance matrix (which turns Q4_0's first eighth of ffn_down into
/// Q4_1), `--pure`, `--output-tensor-type`, and mixture-of-experts models.
///
/// A tensor of rows x cols in a type with blocks of B weights and b bytes takes rows (cols / B) b
/// bytes; the file is the sum plus its metadata (under a megabyte for these vocabularies), and its
/// bits per weight \f$ 8 \sum \text{bytes} / \sum \text{weights} \f$ are what llama.cpp's loader
/// prints as "BPW".

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

/// @ingroup ch08
/// llama.cpp's file types ("mixes") that the chapter sizes.
enum class KQuantMix { q4_0, q8_0, q4_K_S, q4_K_M, q5_K_M, q6_K };

/// @ingroup ch08
/// "Q4_K_M", "Q4_K_S", ... as llama-quantize names them.
std::string mix_name(KQuantMix mix);

/// @ingroup ch08
/// The mix called `name` (case-insensitive); an error naming `mix` and listing the known ones otherwise.
KQuantMix kquant_mix(const std::string& name);

/// @ingroup ch08
/// llama.cpp's \f$ \mathrm{use\_more\_bits}(i, n) \f$ above: layer i of n gets the bigger type in the _M mixes.
/// Errors: n not positive, i outside [0, n).
bool use_more_bits(long long i_layer, long long n_layers);

/// @ingroup ch08
/// One tensor of a GGUF file: its name, its shape, the type the mix gives it and that type's block.
struct TensorType {
  std::string name;           ///< GGUF name: "token_embd.weight", "blk.3.attn_v.weight", ...
  long long rows = 0;         ///< ggml's ne[1] (1 for a norm)
  long long cols = 0;         ///< ggml's ne[0], the row length the blocks cut
  std::string type;           ///< "Q4_K", "Q6_K", "F32", ...
  long long block_size = 0;   ///< weights per block of `type`
  long long block_bytes = 0;  ///< bytes per block of `type`
  long long weights() const { return rows * cols; }
  long long bytes() const { return rows * (cols / block_size) * block_bytes; }
};

/// @ingroup ch08
/// Every tensor of `shape` quantized with `mix` by llama.cpp's rules above: token_embd, then per layer
/// attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down, then
/// output_norm and output (absent when tied). Errors: those of decoder_parameters, a row length no
/// block of the chosen type divides and no fallback covers.
std::vector<TensorType> llama_cpp_tensor_types(const DecoderShape& shape, KQuantMix mix);

/// @ingroup ch08
/// The tensors' total: bytes (the file without its metadata) and weights.
struct MixSize {
  long long bytes = 0, weights = 0;
  double gib() const { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }
  double bits_per_weight() const { return 8.0 * static_cast<double>(bytes) / static_cast<double>(weights); }
};

/// @ingroup ch08
/// The sum over llama_cpp_tensor_types(shape, mix).
MixSize mix_size(const DecoderShape& shape, KQuantMix mix);

}  // namespace tvlab::analysis
