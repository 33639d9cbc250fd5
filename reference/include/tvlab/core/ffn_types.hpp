#pragma once
/// @file
/// Weights and input checks shared by every feed-forward implementation (chapter 01).

#include "tvlab/core/tensor.hpp"

namespace tvlab {

/// The 2017 FFN \f$ \mathrm{FFN}(x) = f(xW_1 + b_1)W_2 + b_2 \f$: `w1` `[d_model, d_ff]`,
/// `w2` `[d_ff, d_model]`; `b1` `[d_ff]` and `b2` `[d_model]` may be empty (no bias, as in
/// most 2023+ models).
struct FfnWeights {
  Tensor2 w1;
  Tensor1 b1;
  Tensor2 w2;
  Tensor1 b2;
};

/// SwiGLU FFN \f$ (\mathrm{Swish}(xW_1) \odot xW_2)\,W_3 \f$ (no biases): `w1` (gate) and
/// `w2` (up) are `[d_model, d_ff]`, `w3` (down) is `[d_ff, d_model]`. Hugging Face's Llama
/// calls them `gate_proj`, `up_proj` and `down_proj`.
struct SwigluWeights {
  Tensor2 w1, w2, w3;
};

/// Checks x `[tokens, d_model]` against the FFN weights; returns d_ff.
std::size_t validate_ffn(const char* function, const Tensor2& x, const FfnWeights& w);
std::size_t validate_swiglu(const char* function, const Tensor2& x, const SwigluWeights& w);

}  // namespace tvlab
