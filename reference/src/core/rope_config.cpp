#include "tvlab/core/rope_config.hpp"

#include <cmath>
#include <limits>

#include "tvlab/core/error.hpp"

namespace tvlab {
namespace {

// Every value of a per-pair list finite and positive, and rotary_dim / 2 of them.
void require_pair_factors(const char* fn, const char* name, const std::vector<double>& values, int rotary) {
  require(values.size() == static_cast<std::size_t>(rotary / 2), fn, "rope_scaling.", name, " has ", values.size(),
          " values; longrope needs one per rotated pair, rotary_dim / 2 = ", rotary / 2);
  for (std::size_t i = 0; i < values.size(); ++i)
    require(std::isfinite(values[i]) && values[i] > 0.0, fn, "rope_scaling.", name, "[", i, "] (", values[i],
            ") must be finite and positive");
}

}  // namespace

const std::vector<std::string>& rope_types() {
  static const std::vector<std::string> types = {"default", "linear", "dynamic", "yarn", "llama3", "longrope"};
  return types;
}

int rotary_dim(const RopeConfig& cfg) {
  // int(head_dim * partial_rotary_factor) in Hugging Face: truncation toward zero.
  return static_cast<int>(static_cast<double>(cfg.head_dim) * cfg.partial_rotary_factor);
}

void validate_rope_config(const char* fn, const RopeConfig& cfg) {
  require(cfg.head_dim > 0 && cfg.head_dim % 2 == 0, fn, "head_dim (", cfg.head_dim,
          ") must be positive and even: RoPE rotates pairs of coordinates");
  require(std::isfinite(cfg.rope_theta) && cfg.rope_theta > 1.0, fn, "rope_theta (", cfg.rope_theta,
          ") must be finite and > 1");
  require_positive(fn, "max_position_embeddings", cfg.max_position_embeddings);
  require(std::isfinite(cfg.partial_rotary_factor) && cfg.partial_rotary_factor > 0.0 &&
              cfg.partial_rotary_factor <= 1.0,
          fn, "partial_rotary_factor (", cfg.partial_rotary_factor, ") must be in (0, 1]");
  const int rotary = rotary_dim(cfg);
  require(rotary >= 2 && rotary % 2 == 0, fn, "partial_rotary_factor (", cfg.partial_rotary_factor,
          ") gives rotary_dim = floor(head_dim * partial_rotary_factor) = ", rotary, " for head_dim ", cfg.head_dim,
          "; it must be even and >= 2 (RoPE rotates pairs)");
  const RopeScaling& s = cfg.rope_scaling;
  bool known = false;
  for (const std::string& t : rope_types()) known = known || s.rope_type == t;
  require(known, fn, "rope_scaling.rope_type ('", s.rope_type,
          "') must be default, linear, dynamic, yarn, llama3 or longrope");
  require(std::isfinite(s.factor) && s.factor >= 1.0, fn, "rope_scaling.factor (", s.factor,
          ") must be finite and >= 1");
  require(s.original_max_position_embeddings >= 0, fn, "rope_scaling.original_max_position_embeddings (",
          s.original_max_position_embeddings, ") must be >= 0 (0: max_position_embeddings)");
  require(std::isfinite(s.beta_fast) && std::isfinite(s.beta_slow) && s.beta_slow > 0.0 && s.beta_fast > s.beta_slow,
          fn, "rope_scaling.beta_fast (", s.beta_fast, ") must exceed rope_scaling.beta_slow (", s.beta_slow,
          ") > 0");
  if (s.attention_factor) {
    require(std::isfinite(*s.attention_factor) && *s.attention_factor > 0.0, fn, "rope_scaling.attention_factor (",
            *s.attention_factor, ") must be positive");
  }
  if (s.mscale)
    require(std::isfinite(*s.mscale) && *s.mscale >= 0.0, fn, "rope_scaling.mscale (", *s.mscale, ") must be >= 0");
  if (s.mscale_all_dim)
    require(std::isfinite(*s.mscale_all_dim) && *s.mscale_all_dim >= 0.0, fn, "rope_scaling.mscale_all_dim (",
            *s.mscale_all_dim, ") must be >= 0");
  if (s.rope_type == "dynamic")
    require(rotary > 2, fn, "rotary_dim (", rotary, ") must exceed 2 for dynamic NTK: its exponent is d / (d - 2)");
  if (s.rope_type == "llama3") {
    require(std::isfinite(s.low_freq_factor) && s.low_freq_factor > 0.0, fn, "rope_scaling.low_freq_factor (",
            s.low_freq_factor, ") must be finite and positive");
    require(std::isfinite(s.high_freq_factor) && s.high_freq_factor > s.low_freq_factor, fn,
            "rope_scaling.high_freq_factor (", s.high_freq_factor, ") must be finite and exceed low_freq_factor (",
            s.low_freq_factor, ")");
    require(s.original_max_position_embeddings > 0, fn, "rope_scaling.original_max_position_embeddings (",
            s.original_max_position_embeddings, ") must be given (> 0) for llama3: its bands are measured in it");
  }
  if (s.rope_type == "longrope") {
    require_pair_factors(fn, "short_factor", s.short_factor, rotary);
    require_pair_factors(fn, "long_factor", s.long_factor, rotary);
  }
}

void validate_rope_input(const char* fn, const Tensor3& x, const RopeFrequencies& freqs, long long position_offset,
                         bool check_x_values) {
  require_nonempty(fn, "x", x);
  require(x.shape()[2] % 2 == 0, fn, "x has head_dim ", x.shape()[2], "; it must be even (RoPE rotates pairs)");
  validate_rope_frequencies(fn, freqs, x.shape()[2]);
  require(position_offset >= 0, fn, "position_offset (", position_offset, ") must be >= 0");
  // The angle m theta_i of the last position must be finite (cos and sin of inf are NaN).
  const double last_position = static_cast<double>(position_offset) + static_cast<double>(x.shape()[1]) - 1.0;
  const double largest_angle = last_position * xt::amax(xt::abs(freqs.inv_freq))();
  require(std::isfinite(largest_angle), fn, "position ", last_position, " times freqs.inv_freq overflows: the angle m theta_i must be finite");
  if (check_x_values) {
    require_finite(fn, "x", x);
    // A rotation mixes the two coordinates of a pair: |x'| <= sqrt(2) a_f max|x| must fit in float.
    const double bound = std::sqrt(2.0) * freqs.attention_factor * static_cast<double>(xt::amax(xt::abs(x))());
    require(bound <= std::numeric_limits<float>::max(), fn, "x times freqs.attention_factor could reach ", bound,
            " after the rotation, beyond float's range (3.4e38)");
  }
}

void validate_rope_frequencies(const char* fn, const RopeFrequencies& freqs, std::size_t head_dim) {
  require(head_dim % 2 == 0, fn, "head_dim (", head_dim, ") must be even: RoPE rotates pairs");
  // Fewer than head_dim / 2 frequencies: only the first 2 * length coordinates rotate.
  require(freqs.inv_freq.size() >= 1 && freqs.inv_freq.size() <= head_dim / 2, fn, "freqs.inv_freq has length ",
          freqs.inv_freq.size(), "; it must be 1 .. head_dim / 2 = ", head_dim / 2,
          " (one per rotated pair; fewer rotate only the first coordinates)");
  require_finite(fn, "freqs.inv_freq", freqs.inv_freq);
  require(std::isfinite(freqs.attention_factor) && freqs.attention_factor > 0.0 &&
              freqs.attention_factor <= std::numeric_limits<float>::max(),
          fn, "freqs.attention_factor (", freqs.attention_factor, ") must be positive and representable in float");
}

double validate_attention_rope(const char* fn, const AttentionRope& rope, std::size_t seq_q, std::size_t seq_k,
                               std::size_t head_dim) {
  require(seq_q <= seq_k, fn, "attention with RoPE positions needs seq_q (", seq_q, ") <= seq_k (", seq_k,
          "): the queries are the last seq_q of the seq_k positions");
  validate_rope_frequencies(fn, rope.freqs, head_dim);
  require(rope.first_position >= 0, fn, "rope.first_position (", rope.first_position, ") must be >= 0");
  return std::sqrt(2.0) * rope.freqs.attention_factor;
}

}  // namespace tvlab
