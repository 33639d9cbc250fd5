#pragma once
/// @file
/// Rotary position embeddings and their context-extension methods (chapter 02), as loops.

#include "tvlab/core/rope_config.hpp"
#include "tvlab/core/tensor.hpp"

namespace tvlab::ref {

/// @ingroup ch02
/// Inverse frequencies for `cfg.rope_scaling.rope_type`, as Hugging Face defines them:
/// - default: \f$ \theta_i = \beta^{-2i/d} \f$, \f$ i = 0 \dots d/2 - 1 \f$, \f$ \beta \f$ = `rope_theta`;
/// - linear (position interpolation): \f$ \theta_i / s \f$;
/// - dynamic (NTK): for `seq_len` \f$ n > L \f$ the base becomes
///   \f$ \beta\,\big(s n / L - (s - 1)\big)^{d/(d-2)} \f$, else default; here \f$ L \f$ is
///   `max_position_embeddings`, as in Hugging Face;
/// - yarn: per pair, a ramp \f$ \gamma_i \in [0, 1] \f$ over the pair index between the correction
///   dimensions of `beta_fast` and `beta_slow` rotations in the original length \f$ L \f$ blends
///   \f$ \theta_i \f$ (extrapolation, \f$ \gamma_i = 1 \f$) with \f$ \theta_i / s \f$ (interpolation),
///   and the attention factor is \f$ 0.1 \ln s + 1 \f$ (or DeepSeek's mscale ratio); `truncate`
///   rounds the ramp's ends to whole pairs;
/// - llama3 (Llama 3.1): by wavelength \f$ \lambda_i = 2\pi/\theta_i \f$, pairs with
///   \f$ \lambda_i < L/h \f$ keep \f$ \theta_i \f$, pairs with \f$ \lambda_i > L/l \f$ get \f$ \theta_i/s \f$,
///   and between \f$ (1-g)\,\theta_i/s + g\,\theta_i \f$ with \f$ g = (L/\lambda_i - l)/(h - l) \f$
///   (\f$ l, h \f$ = `low_freq_factor`, `high_freq_factor`);
/// - longrope (LongRoPE): \f$ \theta_i / \lambda_i \f$ with \f$ \lambda \f$ = `short_factor` for
///   `seq_len` \f$ \le L \f$ (or 0) and `long_factor` beyond; attention factor
///   \f$ \sqrt{1 + \ln s / \ln L} \f$ (1 for \f$ s \le 1 \f$) unless `attention_factor` is given.
///
/// \f$ d \f$ is `rotary_dim(cfg)` (head_dim unless `partial_rotary_factor` < 1), and there are
/// \f$ d/2 \f$ frequencies. `seq_len` matters only for `dynamic` and `longrope` (0: no length given,
/// which is max_position_embeddings for dynamic and the short factors for longrope).
RopeFrequencies rope_frequencies(const RopeConfig& cfg, long long seq_len = 0);

/// @ingroup ch02
/// DeepSeek's softmax-scale multiplier for YaRN (DeepSeek-V2/V3, and Hugging Face's DeepSeek
/// attention): \f$ \big(0.1\,\mu \ln s + 1\big)^2 \f$ with \f$ \mu \f$ = `mscale_all_dim`, for
/// any rope_type but default with mscale_all_dim set and non-zero (Hugging Face's
/// `yarn_apply_mscale`); 1 otherwise. The
/// attention scale becomes \f$ (1/\sqrt{d_{qk}}) \f$ times this, while cos/sin carry only the ratio
/// mscale / mscale_all_dim (1 for V3): the temperature moves from q and k into the softmax.
double deepseek_softmax_scale_factor(const RopeScaling& scaling);
/// @ingroup ch02
/// The document's static NTK-aware base: \f$ \beta' = \beta\,\alpha^{d/(d-2)} \f$. (Dynamic NTK
/// applies the same formula with \f$ \alpha \f$ growing with the current length.)
double ntk_aware_base(double base, double alpha, int head_dim);

/// @ingroup ch02
/// Rotates every pair of every row of x `[heads, seq, head_dim]` at position
/// \f$ m = \text{position\_offset} + \text{row} \f$:
/// \f$ (x_a, x_b) \mapsto a_f\,(x_a\cos m\theta_i - x_b\sin m\theta_i,\; x_a\sin m\theta_i + x_b\cos m\theta_i) \f$
/// with \f$ (a, b) = (2i, 2i+1) \f$ (interleaved) or \f$ (i, i + d_r/2) \f$ (half_split) and
/// \f$ a_f \f$ = `freqs.attention_factor`, for the \f$ d_r/2 \f$ pairs of `freqs.inv_freq`. When
/// \f$ d_r \f$ < head_dim (partial rotation) the pairs lie in the first \f$ d_r \f$ coordinates, as
/// Hugging Face's `rotate_half` on `x[..., :rotary_dim]`, and the other coordinates are copied unchanged
/// (not multiplied by \f$ a_f \f$).
Tensor3 apply_rope(const Tensor3& x, const RopeFrequencies& freqs, RopeLayout layout, long long position_offset = 0);

}  // namespace tvlab::ref
