#pragma once
/// @file
/// Parameters and compute of FFN variants (chapter 01): why SwiGLU uses \f$ d_{ff} = \tfrac83 d \f$.

namespace tvlab::analysis {

enum class FfnKind { relu, gelu, swiglu };
const char* ffn_kind_name(FfnKind kind);

/// Weight matrices of the variant: 2 (\f$ W_1, W_2 \f$) or 3 for SwiGLU (\f$ W_1, W_2, W_3 \f$).
int ffn_matrices(FfnKind kind);

/// Parameters of one FFN: matrices x d_model x d_ff, plus \f$ d_{ff} + d \f$ biases when `with_bias`
/// (ReLU/GELU FFN of 2017/GPT-3; SwiGLU models have none).
double ffn_params(FfnKind kind, long long d_model, long long d_ff, bool with_bias = false);

/// MACs per token: matrices x d_model x d_ff (activations and gating excluded). FLOPs are twice this.
double ffn_macs_per_token(FfnKind kind, long long d_model, long long d_ff);

/// The d_ff that gives SwiGLU the parameters of a 4d two-matrix FFN: \f$ 3 d\, d_{ff} = 8 d^2 \Rightarrow d_{ff} = \tfrac83 d \f$.
double swiglu_equal_params_width(long long d_model);

/// LLaMA's rounding of that width (Meta's reference code): \f$ h = \lfloor 2\cdot 4d/3 \rfloor \f$, then up to a
/// multiple of `multiple_of` (256): 4096 -> 11008.
long long llama_intermediate_size(long long d_model, long long multiple_of = 256);

}  // namespace tvlab::analysis
