#include "tvlab/analysis/linear_state_memory.hpp"

#include "tvlab/analysis/kv_memory.hpp"
#include "tvlab/core/error.hpp"

namespace tvlab::analysis {

double linear_state_bytes_per_layer(long long heads, long long d_k, long long d_v, bool normaliser, DType dtype) {
  const char* fn = "linear_state_bytes_per_layer";
  require_positive(fn, "heads", heads);
  require_positive(fn, "d_k", d_k);
  require_positive(fn, "d_v", d_v);
  // heads (d_k d_v + [normaliser] d_k) numbers
  const double elements = static_cast<double>(heads) * (static_cast<double>(d_k) * d_v + (normaliser ? d_k : 0));
  return elements * bytes_per_element(dtype);
}

std::vector<StateAgainstCache> state_against_kv_cache(const ModelConfig& model, const std::vector<long long>& contexts,
                                                      DType dtype) {
  const double state = static_cast<double>(model.num_hidden_layers) *
                       linear_state_bytes_per_layer(model.num_attention_heads, model.head_dim, model.head_dim, false, dtype);
  std::vector<StateAgainstCache> rows;
  for (const long long context : contexts)
    rows.push_back({context, state, kv_cache_size(model, context, 1, dtype).bytes_per_sequence});
  return rows;
}

double break_even_context(const ModelConfig& model) {
  require_positive("break_even_context", "num_key_value_heads", model.num_key_value_heads);
  // h d_h^2 = S 2 g d_h  =>  S = h d_h / (2 g)
  return static_cast<double>(model.num_attention_heads) * static_cast<double>(model.head_dim) /
         (2.0 * static_cast<double>(model.num_key_value_heads));
}

}  // namespace tvlab::analysis
