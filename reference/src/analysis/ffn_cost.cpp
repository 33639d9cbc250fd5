#include "tvlab/analysis/ffn_cost.hpp"

#include "tvlab/core/error.hpp"

namespace tvlab::analysis {

const char* ffn_kind_name(FfnKind kind) {
  switch (kind) {
    case FfnKind::relu: return "ReLU";
    case FfnKind::gelu: return "GELU";
    case FfnKind::swiglu: return "SwiGLU";
  }
  return "?";
}

int ffn_matrices(FfnKind kind) { return kind == FfnKind::swiglu ? 3 : 2; }

double ffn_params(FfnKind kind, long long d_model, long long d_ff, bool with_bias) {
  require_positive("ffn_params", "d_model", d_model);
  require_positive("ffn_params", "d_ff", d_ff);
  const double d = static_cast<double>(d_model), f = static_cast<double>(d_ff);
  return ffn_matrices(kind) * d * f + (with_bias ? f + d : 0.0);
}

double ffn_macs_per_token(FfnKind kind, long long d_model, long long d_ff) {
  require_positive("ffn_macs_per_token", "d_model", d_model);
  require_positive("ffn_macs_per_token", "d_ff", d_ff);
  return ffn_matrices(kind) * static_cast<double>(d_model) * static_cast<double>(d_ff);
}

double swiglu_equal_params_width(long long d_model) {
  require_positive("swiglu_equal_params_width", "d_model", d_model);
  return 8.0 * static_cast<double>(d_model) / 3.0;
}

long long llama_intermediate_size(long long d_model, long long multiple_of) {
  require_positive("llama_intermediate_size", "d_model", d_model);
  require_positive("llama_intermediate_size", "multiple_of", multiple_of);
  require(d_model <= (1LL << 40) && multiple_of <= (1LL << 20), "llama_intermediate_size", "d_model (", d_model,
          ") or multiple_of (", multiple_of, ") too large for 64-bit arithmetic");
  const long long hidden = 2 * (4 * d_model) / 3;  // int(2 * hidden_dim / 3) with hidden_dim = 4d
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

}  // namespace tvlab::analysis
