#pragma once
/// @file
/// Configuration of rotary position embeddings (chapter 02), with the names Hugging Face uses
/// (`rope_theta`, `partial_rotary_factor`, `rope_scaling{rope_type, factor,
/// original_max_position_embeddings, beta_fast, beta_slow, attention_factor, mscale,
/// mscale_all_dim, truncate, low_freq_factor, high_freq_factor, short_factor, long_factor}`).

#include <optional>
#include <string>
#include <vector>

#include "tvlab/core/tensor.hpp"

namespace tvlab {

/// Which coordinates form a rotated pair.
enum class RopeLayout {
  interleaved,  ///< pairs (2i, 2i+1), as in the RoFormer paper
  half_split,   ///< pairs (i, i + d/2), Llama / Hugging Face `rotate_half`
};

/// How the frequencies are changed to reach beyond the pre-training length (Hugging Face's
/// `rope_scaling`, called `rope_parameters` by newer transformers).
struct RopeScaling {
  std::string rope_type = "default";             ///< default | linear | dynamic | yarn | llama3 | longrope
  double factor = 1.0;                           ///< context extension factor s
  long long original_max_position_embeddings = 0;  ///< pre-training length L (0: max_position_embeddings)
  double beta_fast = 32.0;                       ///< YaRN: rotations above which a pair is extrapolated
  double beta_slow = 1.0;                        ///< YaRN: rotations below which a pair is interpolated
  std::optional<double> attention_factor;        ///< YaRN, LongRoPE: explicit factor of cos and sin
  std::optional<double> mscale, mscale_all_dim;  ///< YaRN, DeepSeek's variant
  bool truncate = true;                          ///< YaRN: round the ramp's ends to whole pairs (floor, ceil)
  double low_freq_factor = 1.0;                  ///< llama3: wavelengths above L / low_freq_factor are divided by s
  double high_freq_factor = 4.0;                 ///< llama3: wavelengths below L / high_freq_factor are kept
  /// longrope: per-pair divisors of \f$ \theta_i \f$ (rotary_dim / 2 values each), the short ones for
  /// sequences up to L, the long ones beyond.
  std::vector<double> short_factor, long_factor;
};

struct RopeConfig {
  int head_dim = 64;                      ///< d, even
  double rope_theta = 10000.0;            ///< base of the frequencies
  long long max_position_embeddings = 2048;
  /// Fraction p of each head that rotates: the first \f$ \lfloor d\,p \rfloor \f$ coordinates
  /// (`rotary_dim`); the others pass through unchanged (GPT-NeoX, Phi, ChatGLM).
  double partial_rotary_factor = 1.0;
  RopeScaling rope_scaling;
};

/// The number of rotated coordinates, \f$ d_r = \lfloor d\,p \rfloor \f$ (Hugging Face's
/// `int(head_dim * partial_rotary_factor)`); the frequencies have \f$ d_r / 2 \f$ entries and
/// their exponents are \f$ 2i / d_r \f$.
int rotary_dim(const RopeConfig& cfg);

/// The rope types `validate_rope_config` accepts, in the order `--help` lists them.
const std::vector<std::string>& rope_types();

/// The inverse frequencies \f$ \theta_i \f$ (one per rotated pair, `[rotary_dim / 2]`: `[head_dim / 2]`
/// unless only part of each head rotates) and the factor cos and sin are multiplied by (YaRN's
/// attention temperature, LongRoPE's scaling; 1 otherwise).
struct RopeFrequencies {
  DTensor1 inv_freq;
  double attention_factor = 1.0;
};

/// Rotary position embedding applied to q and k before attention (chapter 02's
/// `rope_attention`; attention itself does not own positions, so that a model may rotate part of
/// each head only, as MLA does). Key j sits at position \f$ p_0 + j \f$ and query i at
/// \f$ p_0 + (n_k - n_q) + i \f$: the queries are the last \f$ n_q \f$ of the \f$ n_k \f$
/// positions, as with a KV cache.
struct AttentionRope {
  RopeFrequencies freqs;                       ///< from `rope_frequencies(cfg)`
  RopeLayout layout = RopeLayout::half_split;  ///< which coordinates form a pair
  long long first_position = 0;                ///< \f$ p_0 \f$, the position of key 0
};

/// Checks a RoPE configuration for `function` (head_dim even and positive, theta > 1, factor >= 1,
/// a known rope_type, beta_fast > beta_slow > 0, lengths positive, partial_rotary_factor in (0, 1]
/// giving an even rotary_dim; llama3: 0 < low_freq_factor < high_freq_factor and L given;
/// longrope: short_factor and long_factor of rotary_dim / 2 positive values) and throws
/// `tvlab::Error` naming the field.
void validate_rope_config(const char* function, const RopeConfig& cfg);

/// Checks the inputs of applying RoPE, shared by every backend: x `[heads, seq, head_dim]` non-empty,
/// finite, head_dim even; `freqs.inv_freq` of length 1 .. head_dim / 2 (fewer than head_dim / 2:
/// only the first 2 * length coordinates rotate) and finite; a positive attention factor;
/// position_offset >= 0.
/// Also: the largest angle \f$ m\,\theta_i \f$ finite, and (with check_x_values)
/// \f$ \sqrt2\,a_f \max|x| \f$ within float's range.
/// `check_x_values = false` skips the scans of x, for a backend that checks
/// them while it rotates (one pass over memory instead of two).
void validate_rope_input(const char* function, const Tensor3& x, const RopeFrequencies& freqs, long long position_offset,
                         bool check_x_values = true);
/// The frequency checks of `validate_rope_input` for rows of `head_dim` coordinates (also used
/// by attention with RoPE): head_dim even, inv_freq of length 1 .. head_dim / 2 and finite, a
/// positive attention factor.
void validate_rope_frequencies(const char* function, const RopeFrequencies& freqs, std::size_t head_dim);

/// Checks `rope` for attention of seq_q queries over seq_k keys of head_dim coordinates (the
/// frequencies as `validate_rope_frequencies`, `rope.first_position` >= 0, and seq_q <= seq_k: the
/// queries are the last seq_q positions) and returns \f$ \sqrt2\,a_f \f$, the most a rotation
/// can grow the largest coordinate of q or k (it mixes the two coordinates of a pair).
double validate_attention_rope(const char* function, const AttentionRope& rope, std::size_t seq_q, std::size_t seq_k,
                               std::size_t head_dim);

}  // namespace tvlab
